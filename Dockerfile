# The one image: controller manager, the two job modes, the gateway (finops-gateway) and the CLI.
#
# Stage 1 builds the wheel and installs it with its dependencies into a virtualenv.
# Stage 2 copies only that virtualenv onto a clean base: no pip cache, no build backend,
# no sources, no compilers. Every dependency ships binary wheels (psycopg[binary],
# cryptography, pydantic-core), so nothing is compiled in either stage.
# tests/e2e/test_wheel_install.py checks the same wheel-into-a-fresh-venv path.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python3 -m pip wheel --no-deps --wheel-dir /dist . \
 && python3 -m venv /opt/finops \
 && /opt/finops/bin/pip install /dist/*.whl \
 && /opt/finops/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="finops-operator" \
      org.opencontainers.image.description="FinOps operator: controller, job modes, gateway and CLI" \
      org.opencontainers.image.licenses="Apache-2.0"
# The venv lives at the same path as in the build stage, so its scripts' shebangs hold.
COPY --from=build /opt/finops /opt/finops
ENV PATH=/opt/finops/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric non-root user (no /etc/passwd entry needed), so runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["finops-operator"]
