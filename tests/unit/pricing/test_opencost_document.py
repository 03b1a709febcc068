"""The rendered OpenCost pricing document matches the documented shape."""

from __future__ import annotations

from finops.pricing import opencost_document


def test_define_pricing_example_renders_as_documented() -> None:
    rates = {
        "cpuHour": "0.031",
        "ramGbHour": "0.004",
        "pvGbHour": "0.00012",
        "gpuHour": "1.80",
        "networkGiB": "0.09",
    }
    assert opencost_document.render("onprem-standard", rates) == {
        "CPU": "0.031",
        "GPU": "1.80",
        "RAM": "0.004",
        "description": "Pricebook from: onprem-standard",
        "internetNetworkEgress": "0.09",
        "provider": "custom",
        "regionNetworkEgress": "0.09",
        "spotCPU": "0",
        "spotRAM": "0",
        "storage": "0.00012",
        "zoneNetworkEgress": "0.09",
    }


def test_empty_string_rates_are_written_as_zero_not_blank() -> None:
    doc = opencost_document.render("b", {"cpuHour": "", "spotCPUHour": "0.011"})
    assert doc["CPU"] == "0"
    assert doc["spotCPU"] == "0.011"


def test_missing_rates_block_renders_all_zero() -> None:
    doc = opencost_document.render("b", None)
    assert {v for k, v in doc.items() if k not in ("provider", "description")} == {"0"}


def test_serialization_is_canonical() -> None:
    a = opencost_document.serialize({"b": "1", "a": "2"})
    b = opencost_document.serialize({"a": "2", "b": "1"})
    assert a == b
