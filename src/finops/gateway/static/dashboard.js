// The FinOps cost dashboard: reads the gateway's /api/v1 routes and draws them.
// Money arrives as integer micros and is formatted here, exactly, as decimal text.
// What is shown lives in the query string (namespace, range, from, to, step, group),
// so a view can be shared; the bearer token never goes there.
"use strict";

(function () {
  const TOKEN_KEY = "finops-dashboard-token";
  const SOURCES = ["subscription", "cpuHour", "ramGbHour", "gpuHour", "pvGbHour", "networkGb"];
  const SOURCE_LABELS = {
    subscription: "Fee",
    cpuHour: "CPU",
    ramGbHour: "RAM",
    gpuHour: "GPU",
    pvGbHour: "PV",
    networkGb: "Network",
  };
  const SOURCE_COLOURS = {
    subscription: "#4e79a7",
    cpuHour: "#f28e2b",
    ramGbHour: "#59a14f",
    gpuHour: "#e15759",
    pvGbHour: "#76b7b2",
    networkGb: "#b07aa1",
  };
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  const RANGES = { "24h": 1, "7d": 7, "30d": 30, "90d": 90 };
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
    "Dec"];
  const HOUR_MS = 3600 * 1000;

  const $ = (id) => document.getElementById(id);
  let chart = null;
  let generation = 0;

  // ---- money and time -------------------------------------------------------------------

  // ISO 4217 minor units of currencies that do not use two decimals (the same table as
  // finops.billing.money); every other code shows two.
  const MINOR_UNITS = {
    BIF: 0, CLP: 0, DJF: 0, GNF: 0, ISK: 0, JPY: 0, KMF: 0, KRW: 0, PYG: 0, RWF: 0, UGX: 0,
    UYI: 0, VND: 0, VUV: 0, XAF: 0, XOF: 0, XPF: 0,
    BHD: 3, IQD: 3, JOD: 3, KWD: 3, LYD: 3, OMR: 3, TND: 3,
    CLF: 4, UYW: 4,
  };

  function currencyDecimals(code) {
    const places = MINOR_UNITS[(code || "").trim().toUpperCase()];
    return places === undefined ? 2 : places;
  }

  // Micros as people read money, as the CLI prints it: the currency's decimals (rounded half
  // to even, for display only) and thousands separators; a non-zero amount below the
  // smallest unit shows as <0.01 rather than 0.00. Integer arithmetic throughout.
  function formatMoney(micros, code) {
    const places = currencyDecimals(code);
    const divisor = 10 ** (6 - places);
    const magnitude = Math.abs(micros);
    let units = Math.floor(magnitude / divisor);
    const rest = magnitude - units * divisor;
    if (2 * rest > divisor || (2 * rest === divisor && units % 2 === 1)) units += 1;
    if (units === 0 && micros !== 0) {
      const smallest = places ? "0." + "1".padStart(places, "0") : "1";
      return micros > 0 ? "<" + smallest : ">-" + smallest;
    }
    const scale = 10 ** places;
    const whole = Math.floor(units / scale).toLocaleString("en-US");
    const fraction = places ? "." + String(units % scale).padStart(places, "0") : "";
    return (micros < 0 && units ? "-" : "") + whole + fraction;
  }

  // The exact decimal text of integer micros (shown on hover): every digit the ledger has.
  function exactMoney(micros, code) {
    const magnitude = Math.abs(micros);
    const whole = Math.floor(magnitude / 1e6).toLocaleString("en-US");
    const fraction = String(magnitude % 1e6).padStart(6, "0").replace(/0+$/, "").padEnd(2, "0");
    return (micros < 0 ? "-" : "") + whole + "." + fraction + (code ? " " + code : "");
  }

  function two(n) {
    return String(n).padStart(2, "0");
  }

  function bucketLabel(iso, step) {
    const t = new Date(iso);
    const day = MONTHS[t.getUTCMonth()] + " " + two(t.getUTCDate());
    return step === "day" ? day : day + " " + two(t.getUTCHours()) + ":00";
  }

  function toInput(date) {
    return date.toISOString().slice(0, 16);
  }

  function fromInput(value) {
    const t = new Date(value + ":00Z");
    return Number.isNaN(t.getTime()) ? null : t;
  }

  function rfc3339(date) {
    return date.toISOString().replace(/\.\d{3}Z$/, "Z");
  }

  // ---- state in the URL -----------------------------------------------------------------

  function readView() {
    const q = new URLSearchParams(window.location.search);
    const view = {
      namespace: q.get("namespace") || "",
      range: q.get("range") || "",
      step: q.get("step") === "day" ? "day" : "hour",
      group: q.get("group") === "subscription" ? "subscription" : "source",
      from: q.get("from") ? new Date(q.get("from")) : null,
      to: q.get("to") ? new Date(q.get("to")) : null,
    };
    if (view.from && view.to && !view.range) view.range = "custom";
    if (!(view.range in RANGES) && view.range !== "custom") view.range = "7d";
    if (view.range !== "custom") {
      const end = new Date(Math.ceil(Date.now() / HOUR_MS) * HOUR_MS);
      view.to = end;
      view.from = new Date(end.getTime() - RANGES[view.range] * 24 * HOUR_MS);
    }
    return view;
  }

  function writeView(view) {
    const q = new URLSearchParams();
    if (view.namespace) q.set("namespace", view.namespace);
    q.set("range", view.range);
    if (view.range === "custom") {
      q.set("from", rfc3339(view.from));
      q.set("to", rfc3339(view.to));
    }
    q.set("step", view.step);
    q.set("group", view.group);
    window.history.replaceState(null, "", "?" + q.toString());
  }

  function showView(view) {
    $("namespace").value = view.namespace;
    $("range").value = view.range;
    $("step").value = view.step;
    $("group").value = view.group;
    $("from").value = toInput(view.from);
    $("to").value = toInput(view.to);
    $("from").disabled = $("to").disabled = view.range !== "custom";
  }

  function viewFromControls() {
    const view = {
      namespace: $("namespace").value,
      range: $("range").value,
      step: $("step").value,
      group: $("group").value,
      from: fromInput($("from").value),
      to: fromInput($("to").value),
    };
    if (view.range === "custom" && (!view.from || !view.to)) view.range = "7d";
    return view;
  }

  // ---- talking to the gateway -----------------------------------------------------------

  function token() {
    return window.sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function takeTokenFromFragment() {
    const fragment = new URLSearchParams(window.location.hash.slice(1));
    const given = fragment.get("token");
    if (given) {
      window.sessionStorage.setItem(TOKEN_KEY, given);
      window.history.replaceState(null, "", window.location.pathname + window.location.search);
    }
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function getJson(path, query) {
    const headers = { Accept: "application/json" };
    if (token()) headers.Authorization = "Bearer " + token();
    const response = await fetch(path + "?" + query.toString(), { headers, cache: "no-store" });
    let body = {};
    try {
      body = await response.json();
    } catch (_) {
      body = {};
    }
    if (!response.ok) throw new ApiError(response.status, body.error || response.statusText);
    return body;
  }

  function windowQuery(view) {
    const q = new URLSearchParams({ from: rfc3339(view.from), to: rfc3339(view.to) });
    if (view.namespace) q.append("namespace", view.namespace);
    return q;
  }

  // ---- drawing --------------------------------------------------------------------------

  function say(state, text) {
    document.body.dataset.state = state;
    $("message").textContent = text;
  }

  function seriesLabel(series, group) {
    return group === "source" ? SOURCE_LABELS[series.key] || series.key : series.key;
  }

  function orderSeries(series, group) {
    const rank = (s) => (group === "source" ? SOURCES.indexOf(s.key) : 0);
    return series.slice().sort((a, b) => rank(a) - rank(b) || a.key.localeCompare(b.key));
  }

  function datasetsFor(body, currency, group) {
    return orderSeries(body.series.filter((s) => s.currency === currency), group).map(
      (s, i) => {
        const colour = group === "source" ? SOURCE_COLOURS[s.key] : PALETTE[i % PALETTE.length];
        return {
          label: seriesLabel(s, group),
          key: s.key,
          micros: s.valuesMicros,
          totalMicros: s.totalMicros,
          data: s.valuesMicros.map((m) => m / 1e6),
          backgroundColor: colour,
          borderColor: colour,
          stack: "cost",
        };
      },
    );
  }

  function drawChart(body, currency, view) {
    const datasets = datasetsFor(body, currency, view.group);
    const labels = body.buckets.map((b) => bucketLabel(b, body.step));
    const axisTitle = (body.step === "day" ? "Day" : "Hour") + " (UTC)";
    const moneyTitle = "Cost (" + (currency || "no currency") + ")";
    if (chart) chart.destroy();
    chart = new window.Chart($("chart"), {
      type: "bar",
      data: { labels, datasets },
      options: {
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        plugins: {
          legend: { position: "top" },
          tooltip: {
            callbacks: {
              label: (item) => item.dataset.label + ": " + currency + " " +
                formatMoney(item.dataset.micros[item.dataIndex], currency),
            },
          },
        },
        scales: {
          x: { stacked: true, title: { display: true, text: axisTitle }, ticks: { autoSkip: true, maxRotation: 0 } },
          y: {
            stacked: true,
            beginAtZero: true,
            title: { display: true, text: moneyTitle },
            ticks: { callback: (value) => Number(value).toFixed(currencyDecimals(currency)) },
          },
        },
      },
    });
    const grouping = view.group === "source" ? "meter" : "Subscription";
    $("chart-title").textContent = "Cost over time by " + grouping + " (" + currency + ")";
    return body.series.filter((s) => s.currency !== currency).length;
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  // A money cell: readable text, the exact amount on hover and in data-micros.
  function moneyCell(row, micros, code, suffix) {
    if (micros === undefined) return cell(row, "\u2013", "num");
    const td = cell(row, formatMoney(micros, code) + suffix, "num");
    td.title = exactMoney(micros, code);
    td.dataset.micros = String(micros);
    return td;
  }

  function pivot(items) {
    const rows = new Map();
    for (const item of items) {
      const offering = item.offeringNamespace + "/" + item.offering;
      const key = [item.namespace, offering, item.subscription, item.currency].join("\u0000");
      if (!rows.has(key)) {
        rows.set(key, { namespace: item.namespace, offering, subscription: item.subscription,
          currency: item.currency, sources: {}, total: 0 });
      }
      const row = rows.get(key);
      row.sources[item.source] = (row.sources[item.source] || 0) + item.totalMicros;
      row.total += item.totalMicros;
    }
    return Array.from(rows.values());
  }

  function drawTable(body, currency) {
    const tbody = $("breakdown").tBodies[0];
    const tfoot = $("breakdown").tFoot;
    tbody.replaceChildren();
    tfoot.replaceChildren();
    const rows = pivot(body.items);
    const totals = new Map();
    for (const r of rows) {
      const tr = tbody.insertRow();
      cell(tr, r.namespace);
      cell(tr, r.offering);
      cell(tr, r.subscription);
      const suffix = r.currency === currency ? "" : " " + (r.currency || "(none)");
      for (const source of SOURCES) moneyCell(tr, r.sources[source], r.currency, suffix);
      moneyCell(tr, r.total, r.currency, suffix);
      const sum = totals.get(r.currency) || { sources: {}, total: 0 };
      for (const source of Object.keys(r.sources)) {
        sum.sources[source] = (sum.sources[source] || 0) + r.sources[source];
      }
      sum.total += r.total;
      totals.set(r.currency, sum);
    }
    if (!rows.length) {
      const td = cell(tbody.insertRow(), "No charges in this window.", "empty");
      td.colSpan = 3 + SOURCES.length + 1;
    }
    for (const [code, sum] of totals) {
      const tr = tfoot.insertRow();
      const label = cell(tr, "Total (" + (code || "no currency") + ")");
      label.colSpan = 3;
      for (const source of SOURCES) moneyCell(tr, sum.sources[source], code, "");
      moneyCell(tr, sum.total, code, "");
    }
    $("table-title").textContent = "Breakdown by namespace, Offering and Subscription (" + currency + ")";
  }

  // ---- the page -------------------------------------------------------------------------

  function fillNamespaces(names, chosen) {
    const select = $("namespace");
    select.replaceChildren(new Option("All I may read", ""));
    for (const name of names) select.appendChild(new Option(name, name));
    if (chosen && !names.includes(chosen)) select.appendChild(new Option(chosen, chosen));
    select.value = chosen;
  }

  function refusal(error, view) {
    if (error.status === 401) {
      $("token-form").hidden = false;
      return ["needs-token", "This gateway needs a Kubernetes bearer token: " + error.message + "."];
    }
    if (error.status === 403) {
      const where = view.namespace ? "namespace " + view.namespace : "this data";
      return ["error", "Not allowed to read " + where + "."];
    }
    return ["error", "The gateway answered " + (error.status || "nothing") + ": " + error.message];
  }

  function clear() {
    if (chart) chart.destroy();
    chart = null;
    $("breakdown").tBodies[0].replaceChildren();
    $("breakdown").tFoot.replaceChildren();
  }

  async function load() {
    const mine = ++generation;
    const view = readView();
    showView(view);
    say("loading", "Loading\u2026");
    try {
      const names = await getJson("api/v1/namespaces", new URLSearchParams());
      fillNamespaces(names.items.map((n) => n.name), view.namespace);
      const query = windowQuery(view);
      const seriesQuery = new URLSearchParams(query);
      seriesQuery.set("step", view.step);
      seriesQuery.set("groupBy", view.group);
      const [series, breakdown] = await Promise.all([
        getJson("api/v1/cost-series", seriesQuery),
        getJson("api/v1/cost-breakdown", query),
      ]);
      if (mine !== generation) return;
      const currency = series.currency || (series.series[0] || {}).currency || "";
      $("currency").textContent = currency || "\u2014";
      const others = drawChart(series, currency, view);
      drawTable(breakdown, currency);
      // Other views of the page (budgets.js) draw with the same helpers and view.
      for (const drawView of window.finopsViews || []) {
        await drawView(view, { getJson, formatMoney, bucketLabel, cell, moneyCell });
      }
      if (mine !== generation) return;
      const scope = series.namespaces.length
        ? series.namespaces.length + " namespace(s): " + series.namespaces.join(", ")
        : "no namespace you may read has charges";
      const note = others ? " Series in other currencies are only in the table." : "";
      say("ready", "Showing " + scope + "." + note);
    } catch (error) {
      if (mine !== generation) return;
      clear();
      const [state, text] = refusal(error, view);
      say(state, text);
    }
  }

  function onControlsChanged() {
    writeView(viewFromControls());
    load();
  }

  function wire() {
    for (const id of ["namespace", "range", "step", "group", "from", "to"]) {
      $(id).addEventListener("change", onControlsChanged);
    }
    $("token-toggle").addEventListener("click", () => {
      $("token-form").hidden = !$("token-form").hidden;
    });
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      window.sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
      $("token-input").value = "";
      $("token-form").hidden = true;
      load();
    });
    $("token-forget").addEventListener("click", () => {
      window.sessionStorage.removeItem(TOKEN_KEY);
      load();
    });
  }

  takeTokenFromFragment();
  wire();
  load();
})();
