// The budget view of the FinOps dashboard: every Budget the viewer may read with its state,
// and, for the one picked, the period's spend so far as a running total, the forecast to the
// period's end and the budget's amount as a line. Drawn by dashboard.js on each load (it
// passes its helpers), from the gateway's /api/v1/budgets routes. Money arrives as micros.
"use strict";

(function () {
  const HOUR_MS = 3600 * 1000;
  const STATE_TEXT = {
    OnTrack: "On track",
    ForecastExceeded: "Forecast over budget",
    Exceeded: "Over budget",
    Unknown: "Unknown (another currency)",
  };
  const $ = (id) => document.getElementById(id);
  let chart = null;
  let chosen = "";

  function key(item) {
    return item.namespace + "/" + item.name;
  }

  function crossedText(item) {
    if (!item.thresholds.length) return "\u2013";
    return item.thresholds.map((t) => t.percent + "% " + t.basis.toLowerCase()).join(", ");
  }

  function drawList(items, help, redraw) {
    const cell = help.cell;
    const tbody = $("budgets").tBodies[0];
    tbody.replaceChildren();
    if (!items.length) {
      const td = cell(tbody.insertRow(), "No Budget in the namespaces you may read.", "empty");
      td.colSpan = 8;
      return;
    }
    for (const item of items) {
      const tr = tbody.insertRow();
      tr.dataset.budget = key(item);
      if (key(item) === chosen) tr.className = "chosen";
      cell(tr, item.namespace);
      const name = document.createElement("button");
      name.type = "button";
      name.className = "link";
      name.textContent = item.name;
      name.addEventListener("click", () => {
        chosen = key(item);
        redraw();
      });
      cell(tr, "").appendChild(name);
      cell(tr, item.period);
      for (const micros of [item.amountMicros, item.spentMicros, item.forecastMicros]) {
        help.moneyCell(tr, micros, item.currency, "");
      }
      const state = cell(tr, STATE_TEXT[item.state] || item.state, "state");
      state.dataset.state = item.state;
      cell(tr, crossedText(item));
    }
  }

  // Instants of the whole period: those the gateway sent (up to the evaluated hour), then
  // every hour to the period's end.
  function periodAxis(detail) {
    const axis = detail.instants.slice();
    const end = new Date(detail.periodEnd).getTime();
    let t = new Date(axis[axis.length - 1]).getTime();
    while (t < end) {
      t += HOUR_MS;
      axis.push(new Date(t).toISOString().replace(/\.\d{3}Z$/, "Z"));
    }
    return axis;
  }

  function datasets(detail, axis) {
    const known = detail.cumulativeMicros.length;
    const spent = axis.map((_, i) => (i < known ? detail.cumulativeMicros[i] : null));
    const forecast = axis.map((_, i) => {
      if (i === known - 1) return detail.spentMicros;
      return i === axis.length - 1 ? detail.forecastMicros : null;
    });
    const amount = axis.map(() => detail.amountMicros);
    const line = (label, keyName, micros, colour, extra) => ({
      label, key: keyName, micros, type: "line", data: micros.map((m) => (m === null ? null : m / 1e6)),
      borderColor: colour, backgroundColor: colour, pointRadius: 0, borderWidth: 2, ...extra,
    });
    return [
      line("Spent so far", "spent", spent, "#2f5f98", {}),
      line("Forecast", "forecast", forecast, "#f28e2b", { borderDash: [6, 4], spanGaps: true }),
      line("Budget", "budget", amount, "#b42318", { borderWidth: 1.5 }),
    ];
  }

  function drawChart(detail, help) {
    const axis = periodAxis(detail);
    const code = detail.currency;
    if (chart) chart.destroy();
    chart = new window.Chart($("budget-chart"), {
      type: "line",
      data: { labels: axis.map((t) => help.bucketLabel(t, "hour")), datasets: datasets(detail, axis) },
      options: {
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        plugins: {
          legend: { position: "top" },
          tooltip: {
            filter: (item) => item.raw !== null,
            callbacks: {
              label: (item) => item.dataset.label + ": " + code + " " +
                help.formatMoney(item.dataset.micros[item.dataIndex], code),
            },
          },
        },
        scales: {
          x: { title: { display: true, text: "Hour (UTC)" }, ticks: { autoSkip: true, maxRotation: 0 } },
          y: { beginAtZero: true, title: { display: true, text: "Spent in the period (" + code + ")" } },
        },
      },
    });
  }

  function drawState(detail, help) {
    const money = (m) => help.formatMoney(m, detail.currency) + " " + detail.currency;
    const end = detail.periodEnd.slice(0, 10);
    $("budget-title").textContent = detail.namespace + "/" + detail.name + ": " +
      detail.period.toLowerCase() + " budget of " + money(detail.amountMicros);
    const state = $("budget-state");
    state.dataset.state = detail.state;
    state.textContent = (STATE_TEXT[detail.state] || detail.state) + ": spent " +
      money(detail.spentMicros) + " so far; forecast " + money(detail.forecastMicros) +
      " by " + end + " (fees ahead " + money(detail.futureFeesMicros) + ", usage ahead about " +
      money(detail.futureUsageMicros) + ").";
  }

  function clearDetail() {
    if (chart) chart.destroy();
    chart = null;
    $("budget-title").textContent = "";
    $("budget-state").textContent = "";
  }

  async function draw(view, help) {
    const query = new URLSearchParams();
    if (view.namespace) query.append("namespace", view.namespace);
    const listed = await help.getJson("api/v1/budgets", query);
    if (!listed.items.some((item) => key(item) === chosen)) {
      chosen = listed.items.length ? key(listed.items[0]) : "";
    }
    const redraw = () => draw(view, help).catch((error) => {
      $("budget-state").textContent = "Could not load the budget: " + error.message;
    });
    drawList(listed.items, help, redraw);
    if (!chosen) {
      clearDetail();
      return;
    }
    const [namespace, name] = chosen.split("/");
    const path = "api/v1/namespaces/" + encodeURIComponent(namespace) + "/budgets/" +
      encodeURIComponent(name);
    const detail = await help.getJson(path, new URLSearchParams());
    drawChart(detail, help);
    drawState(detail, help);
  }

  window.finopsViews = (window.finopsViews || []).concat([draw]);
})();
