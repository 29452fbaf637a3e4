// The Logs view: records of a logs exchange as they arrive (Server-Sent Events read with
// fetch, so the request carries the login), newest at the bottom, coloured by severity as
// `leveret receive-logs` colours a terminal; filters, search, pause; and beside it the
// lake's numbers (records per minute by severity, error rate, the ingest's lag, the report).
"use strict";

import * as api from "./api.js";
import { drawStackedBars } from "./charts.js";
import { lakeSearch } from "./page-logs-search.js";
import { card, fmtBytes, fmtInt, fmtTime, h, link, setOptions } from "./ui.js";

const SEVERITIES = ["debug", "info", "warning", "error", "critical"];
// The report's palette (leveret pipeline report draws its charts in these).
const CHART_COLOURS = { debug: "#9e9e9e", info: "#1976d2", warning: "#f9a825", error: "#e53935", critical: "#6a1b9a", other: "#607d8b", unseen: "#cfd8dc" };
const KEEP = 5000; // records the page keeps (filters apply to them)
const MAX_ROWS = 2000; // rows in the list at once
const MAX_PENDING = 5000; // records held while paused; beyond, the oldest are dropped
const MAX_CHOICES = 200;

function lineOf(r) {
  const who = r.app && r.pid ? `${r.app}[${r.pid}]` : r.app;
  const parts = [r.ts, (r.severity || "").toUpperCase().padEnd(8), r.facility];
  if (r.host) parts.push(r.host);
  if (who) parts.push(who);
  let head = parts.join(" ");
  if (r.logger) head += " " + r.logger;
  return head;
}

function sevClass(s) {
  const v = String(s || "").toLowerCase();
  return SEVERITIES.includes(v) ? v : "info";
}

function searchable(r) {
  if (r._text === undefined) {
    r._text = [r.message, r.logger, r.app, r.host, r.facility, r.exc, r.extra ? JSON.stringify(r.extra) : "", r._message && r._message.routing_key]
      .filter(Boolean)
      .join("\n")
      .toLowerCase();
  }
  return r._text;
}

export function logsPage() {
  const q = new URLSearchParams(location.search);
  const state = {
    vhost: q.get("vhost") || "/",
    exchange: q.get("exchange") || "logs",
    severities: new Set((q.get("severity") || SEVERITIES.join(",")).split(",").filter((s) => SEVERITIES.includes(s))),
    app: q.get("app") || "",
    host: q.get("host") || "",
    facility: q.get("facility") || "",
    text: q.get("q") || "",
    paused: false,
    follow: true,
  };
  const records = []; // newest last
  let pending = [];
  let pausedDropped = 0;
  let serverDropped = { broker: 0, server: 0 }; // of earlier connections
  let lastDropped = { broker: 0, server: 0 };
  let received = 0;
  let maxRate = 0;
  let unseenNew = 0;
  let selected = null;
  let abort = null;
  let destroyed = false;
  let retry = null;
  const choices = { app: new Set(), host: new Set(), facility: new Set() };
  let choicesDirty = false;
  const counts = Object.fromEntries(SEVERITIES.map((s) => [s, 0]));

  // ------------------------------------------------------------------- toolbar
  const chips = SEVERITIES.map((s) =>
    h(
      `button.chip.sev-chip.sev-${s}`,
      {
        type: "button",
        "aria-pressed": String(state.severities.has(s)),
        dataset: { severity: s },
        title: `Show ${s} records`,
        onclick: () => {
          if (state.severities.has(s)) state.severities.delete(s);
          else state.severities.add(s);
          chip(s).setAttribute("aria-pressed", String(state.severities.has(s)));
          filtersChanged();
        },
      },
      s,
      h("span.count", "0"),
    ),
  );
  const chip = (s) => chips[SEVERITIES.indexOf(s)];
  const filterSelect = (name, label) => {
    const el = h(`select#logs-${name}`, { name, "aria-label": label, onchange: () => { state[name] = el.value; filtersChanged(); } });
    setOptions(el, [["", `All ${label}`]]);
    return el;
  };
  const appSel = filterSelect("app", "apps");
  const hostSel = filterSelect("host", "hosts");
  const facSel = filterSelect("facility", "facilities");
  const search = h("input#logs-search", {
    type: "search", placeholder: "Search records  ( / )", value: state.text, "data-search": "",
    "aria-label": "Search records",
    oninput: () => { state.text = search.value; filtersChanged(); },
  });
  const pauseBtn = h("button#logs-pause", { type: "button", title: "Pause or resume (p)", onclick: () => togglePause() }, "Pause");
  const clearBtn = h("button#logs-clear", { type: "button", title: "Clear the list", onclick: () => clearAll() }, "Clear");
  const vhostSel = h("select#logs-vhost", { "aria-label": "Virtual host", onchange: () => sourceChanged() });
  setOptions(vhostSel, [state.vhost]);
  const exchangeIn = h("input#logs-exchange", {
    value: state.exchange, size: 10, "aria-label": "Exchange",
    onchange: () => sourceChanged(),
  });
  const statusDot = h("span#logs-status.status-dot", { dataset: { status: "connecting" } }, "connecting");
  const countsLine = h("span#logs-counts.muted");
  const droppedLine = h("span#logs-dropped.dropped", { hidden: true });
  const list = h("div#log-list.log-list", { role: "log", "aria-live": "off", tabindex: "0" });
  const jump = h("button#logs-jump.jump", { type: "button", hidden: true, onclick: () => followAgain() });
  const detail = h("aside#record-detail.drawer", { hidden: true, "aria-label": "Record" });

  list.addEventListener("scroll", () => {
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 24;
    if (atBottom !== state.follow) {
      state.follow = atBottom;
      if (atBottom) {
        unseenNew = 0;
        jump.hidden = true;
      }
    }
  });
  list.addEventListener("click", (e) => {
    const row = e.target.closest(".log-row");
    if (row) select(row, true);
  });

  // ---------------------------------------------------------------- side panel
  const lakeCanvas = h("canvas#lake-chart.chart.small", { width: 360, height: 170 });
  const liveCanvas = h("canvas#live-chart.chart.small", { width: 360, height: 140 });
  const lakeFigures = h("dl#lake-figures.figures.compact");
  const lakeNote = h("p#lake-note.muted");
  const lagBox = h("div#ingest-lag.lag");
  const liveFigures = h("dl#live-figures.figures.compact");
  const reportBox = h("div#report-link");
  const alertsBox = h("div#lake-alerts", h("p.muted", "…"));
  let alertsAt = 0;
  const legend = (keys) => h("ul.legend.small", keys.map((k) => h("li", h("i", { style: `background:${CHART_COLOURS[k]}` }), k)));

  const side = h(
    "div.logs-side",
    card("Lake · records per minute", lakeCanvas, legend([...SEVERITIES]), h("p.muted.small", "Line: error rate (error + critical), right scale."), lagBox, lakeFigures, lakeNote),
    card("Live · as this view received them", liveCanvas, legend([...SEVERITIES, "unseen"]), liveFigures),
    card("Alerts · newest first", alertsBox),
    card("Report", reportBox),
  );

  const searchLake = lakeSearch((r) => showDetail(r));
  const el = h(
    "div.page.logs-page",
    h(
      "div.logs-layout",
      h(
        "section.card.logs-main",
        h(
          "div.toolbar",
          h("div.chips", { role: "group", "aria-label": "Severities" }, chips),
          appSel, hostSel, facSel, search,
          h("span.spacer"),
          pauseBtn, clearBtn,
        ),
        h("div.logs-statusbar", statusDot, h("span.source", "from ", vhostSel, " exchange ", exchangeIn), countsLine, droppedLine),
        h("div.list-wrap", list, jump),
      ),
      side,
    ),
    searchLake.el,
    detail,
  );

  // ------------------------------------------------------------------ filtering
  function matches(r) {
    if (!state.severities.has(sevClass(r.severity))) return false;
    if (state.app && r.app !== state.app) return false;
    if (state.host && r.host !== state.host) return false;
    if (state.facility && r.facility !== state.facility) return false;
    if (state.text && !searchable(r).includes(state.text.toLowerCase())) return false;
    return true;
  }

  function filtersChanged() {
    const p = new URLSearchParams();
    if (state.vhost !== "/") p.set("vhost", state.vhost);
    if (state.exchange !== "logs") p.set("exchange", state.exchange);
    if (state.severities.size !== SEVERITIES.length) p.set("severity", SEVERITIES.filter((s) => state.severities.has(s)).join(","));
    for (const k of ["app", "host", "facility"]) if (state[k]) p.set(k, state[k]);
    if (state.text) p.set("q", state.text);
    const qs = p.toString();
    history.replaceState(null, "", "/logs" + (qs ? "?" + qs : ""));
    rebuild();
  }

  function rebuild() {
    const shown = records.filter(matches).slice(-MAX_ROWS);
    const frag = document.createDocumentFragment();
    for (const r of shown) frag.appendChild(row(r));
    list.replaceChildren(frag);
    selected = null;
    state.follow = true;
    unseenNew = 0;
    jump.hidden = true;
    list.scrollTop = list.scrollHeight;
    updateCounts();
  }

  function row(r) {
    const sev = sevClass(r.severity);
    // a body no reader takes for a record is shown whole, as the lake keeps it (_corrupt)
    const malformed = r._corrupt !== undefined && r._corrupt !== null;
    const el = h(
      `div.log-row.sev-${sev}${malformed ? ".malformed" : ""}`,
      { dataset: { seq: r._seq, severity: sev } },
      h("span.ts", r.ts || ""),
      " ",
      h("span.sev", malformed ? "MALFORMED" : (r.severity || "").toUpperCase().padEnd(8)),
      " ",
      malformed ? "" : h("span.meta", lineOf(r).slice((r.ts || "").length + 10)),
      malformed ? "" : ": ",
      h("span.msg", malformed ? r._corrupt : r.message || ""),
    );
    el._record = r;
    if (r.exc) el.appendChild(h("div.exc", r.exc));
    return el;
  }

  // ------------------------------------------------------------------- receiving
  function add(batch) {
    const frag = document.createDocumentFragment();
    let added = 0;
    for (const r of batch) {
      records.push(r);
      received++;
      const sev = sevClass(r.severity);
      counts[sev]++;
      for (const k of ["app", "host", "facility"]) {
        if (r[k] && !choices[k].has(r[k]) && choices[k].size < MAX_CHOICES) {
          choices[k].add(r[k]);
          choicesDirty = true;
        }
      }
      if (matches(r)) {
        frag.appendChild(row(r));
        added++;
      }
    }
    if (records.length > KEEP) records.splice(0, records.length - KEEP);
    if (added) {
      list.appendChild(frag);
      let extra = list.childElementCount - MAX_ROWS;
      while (extra-- > 0) list.firstElementChild.remove();
      if (state.follow) list.scrollTop = list.scrollHeight;
      else {
        unseenNew += added;
        jump.hidden = false;
        jump.textContent = `↓ ${fmtInt(unseenNew)} new`;
      }
    }
    if (choicesDirty) updateChoices();
    updateCounts();
  }

  function onBatch(b) {
    statusDot.dataset.status = b.status;
    statusDot.textContent = b.status === "live" ? "live" : b.status === "waiting" ? "waiting" : b.status === "error" ? "error" : b.status;
    statusDot.title = b.error || (b.status === "live" ? `consuming through ${b.queue}; at most ${b.max_rate} records/s reach this view` : "");
    statusDot.classList.toggle("has-error", Boolean(b.error));
    statusDot.dataset.error = b.error || "";
    if (b.error) statusDot.textContent = `${statusDot.textContent}: ${b.error}`;
    lastDropped = b.dropped || lastDropped;
    maxRate = b.max_rate || maxRate;
    if (b.records && b.records.length) {
      if (state.paused) {
        pending.push(...b.records);
        if (pending.length > MAX_PENDING) {
          pausedDropped += pending.length - MAX_PENDING;
          pending = pending.slice(-MAX_PENDING);
        }
        pauseBtn.textContent = `Resume (${fmtInt(pending.length)})`;
      } else add(b.records);
    }
    updateCounts();
  }

  function updateCounts() {
    for (const s of SEVERITIES) chip(s).querySelector(".count").textContent = fmtInt(counts[s]);
    countsLine.textContent = `${fmtInt(received)} received · ${fmtInt(list.childElementCount)} shown`;
    const broker = serverDropped.broker + lastDropped.broker;
    const server = serverDropped.server + lastDropped.server;
    const total = broker + server + pausedDropped;
    droppedLine.hidden = total === 0;
    if (total) {
      const parts = [];
      if (broker) parts.push(`${fmtInt(broker)} by the broker (this view takes at most ${maxRate || "a few hundred"} records/s)`);
      if (server) parts.push(`${fmtInt(server)} because this browser read too slowly`);
      if (pausedDropped) parts.push(`${fmtInt(pausedDropped)} while paused`);
      droppedLine.textContent = `${fmtInt(total)} dropped, oldest first: ${parts.join("; ")}`;
      droppedLine.dataset.total = String(total);
    }
  }

  function updateChoices() {
    choicesDirty = false;
    const opts = (k, label) => [["", `All ${label}`], ...[...choices[k]].sort().map((v) => [v, v])];
    setOptions(appSel, opts("app", "apps"));
    setOptions(hostSel, opts("host", "hosts"));
    setOptions(facSel, opts("facility", "facilities"));
    appSel.value = state.app;
    hostSel.value = state.host;
    facSel.value = state.facility;
  }

  // ---------------------------------------------------------------- connection
  async function connect() {
    if (destroyed) return;
    abort = new AbortController();
    const qs = new URLSearchParams({ vhost: state.vhost, exchange: state.exchange });
    try {
      const resp = await fetch(`/api/logs/stream?${qs}`, { headers: { Accept: "text/event-stream", "X-Requested-With": "XMLHttpRequest", ...api.authHeader() }, signal: abort.signal });
      if (!resp.ok) {
        let reason = resp.statusText;
        try {
          reason = (await resp.json()).reason || reason;
        } catch {}
        throw new Error(reason);
      }
      statusDot.dataset.status = "connecting";
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (data) onBatch(JSON.parse(data));
        }
      }
      throw new Error("the stream ended");
    } catch (err) {
      if (destroyed || (err && err.name === "AbortError")) return;
      serverDropped = { broker: serverDropped.broker + lastDropped.broker, server: serverDropped.server + lastDropped.server };
      lastDropped = { broker: 0, server: 0 };
      statusDot.dataset.status = "error";
      statusDot.textContent = `disconnected: ${err.message}; retrying`;
      retry = setTimeout(connect, 2000);
    }
  }

  function reconnect() {
    if (abort) abort.abort();
    clearTimeout(retry);
    serverDropped = { broker: serverDropped.broker + lastDropped.broker, server: serverDropped.server + lastDropped.server };
    lastDropped = { broker: 0, server: 0 };
    connect();
  }

  function sourceChanged() {
    state.vhost = vhostSel.value;
    state.exchange = exchangeIn.value.trim() || "logs";
    clearAll();
    filtersChanged();
    reconnect();
  }

  // ------------------------------------------------------------------ actions
  function togglePause() {
    state.paused = !state.paused;
    pauseBtn.classList.toggle("active", state.paused);
    el.classList.toggle("paused", state.paused);
    if (!state.paused) {
      const held = pending;
      pending = [];
      pauseBtn.textContent = "Pause";
      if (held.length) add(held);
    } else pauseBtn.textContent = "Resume";
    pauseBtn.setAttribute("aria-pressed", String(state.paused));
  }

  function clearAll() {
    records.length = 0;
    pending = [];
    list.replaceChildren();
    for (const s of SEVERITIES) counts[s] = 0;
    received = 0;
    pausedDropped = 0;
    serverDropped = { broker: -lastDropped.broker, server: -lastDropped.server };
    closeDetail();
    updateCounts();
  }

  function followAgain() {
    state.follow = true;
    unseenNew = 0;
    jump.hidden = true;
    list.scrollTop = list.scrollHeight;
  }

  function select(rowEl, open) {
    if (selected) selected.classList.remove("selected");
    selected = rowEl;
    if (!rowEl) return;
    rowEl.classList.add("selected");
    rowEl.scrollIntoView({ block: "nearest" });
    if (open) showDetail(rowEl._record);
  }

  function showDetail(r) {
    const fields = [];
    for (const k of ["ts", "severity", "facility", "host", "app", "pid", "logger", "message"]) {
      if (r[k] !== undefined && r[k] !== null) fields.push([k, String(r[k])]);
    }
    const m = r._message || {};
    const props = m.properties || {};
    const rows = (pairs) => h("table.kv", h("tbody", pairs.map(([k, v]) => h("tr", h("th", k), h("td", v)))));
    const pre = (text) => h("pre.block", text);
    detail.replaceChildren(
      h("div.drawer-head", h("h2", "Record"), h("button.link#record-close", { type: "button", onclick: () => closeDetail(), title: "Close (Esc)" }, "Close ✕")),
      h("div", { class: `sev-badge sev-${sevClass(r.severity)}` }, String(r.severity || "").toUpperCase()),
      rows(fields),
      r.exc ? h("div", h("h3", "Exception"), pre(r.exc)) : "",
      r.extra ? h("div", h("h3", "Extra"), pre(JSON.stringify(r.extra, null, 2))) : "",
      r._lake ? h("h3", "In the lake") : "",
      r._lake ? rows([["stream offset", String(r.offset ?? "")], ["message id", String(r.message_id ?? "")], ...(r._corrupt ? [["malformed body", r._corrupt]] : [])]) : "",
      r._lake ? "" : h("h3", "Message"),
      r._lake ? "" : rows([
        ["exchange", m.exchange === "" ? "(AMQP default)" : m.exchange],
        ["routing key", m.routing_key],
        ["redelivered", String(m.redelivered)],
        ["payload", `${fmtInt(m.payload_bytes)} bytes${r._corrupt !== undefined ? " (malformed: not a record, shown whole)" : r._plain ? " (plain text, shown as its message)" : " (JSON record)"}${r._cut ? "; long fields cut to 16 KiB for this view" : ""}`],
        ["received", fmtTime(r._received)],
        ...Object.entries(props).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)]),
      ]),
      h("h3", "As JSON"),
      pre(JSON.stringify(Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("_"))), null, 2)),
    );
    detail.hidden = false;
    el.classList.add("with-drawer");
    detail.querySelector("#record-close").focus();
  }

  function closeDetail() {
    detail.hidden = true;
    el.classList.remove("with-drawer");
    if (selected) list.focus();
  }

  function keys(e) {
    if (e.key === "p") {
      e.preventDefault();
      togglePause();
    } else if (e.key === "Escape") {
      if (!detail.hidden) closeDetail();
    } else if (e.key === "j" || e.key === "k") {
      e.preventDefault();
      const rows = list.children;
      if (!rows.length) return;
      let next;
      if (!selected || !selected.isConnected) next = e.key === "j" ? rows[0] : rows[rows.length - 1];
      else next = e.key === "j" ? selected.nextElementSibling || selected : selected.previousElementSibling || selected;
      state.follow = false;
      select(next, !detail.hidden);
    } else if (e.key === "Enter" && selected) {
      e.preventDefault();
      showDetail(selected._record);
    } else if (e.key === "End") {
      e.preventDefault();
      followAgain();
    }
  }

  // ---------------------------------------------------------------- side panel
  async function refresh() {
    const qs = new URLSearchParams({ vhost: state.vhost, exchange: state.exchange });
    const [d, vhosts] = await Promise.all([api.get(`/logs/lake?${qs}`), api.get("/vhosts?columns=name")]);
    setOptions(vhostSel, vhosts.map((v) => v.name));
    vhostSel.value = state.vhost;
    const lake = d.lake;
    const rateMax = Math.max(0.05, ...lake.per_minute.map((r) => r.error_rate));
    drawStackedBars(lakeCanvas, lake.per_minute, SEVERITIES.map((k) => ({ key: k, color: CHART_COLOURS[k] })), {
      line: { key: "error_rate", color: "#b71c1c", max: rateMax, label: `${Math.round(rateMax * 100)}%` },
    });
    const s = lake.summary;
    const lastMinute = lake.per_minute[lake.per_minute.length - 1];
    lakeFigures.replaceChildren(
      ...[
        ["Records", fmtInt(s.records)],
        ["Errors", fmtInt(s.errors)],
        ["Error rate", s.records ? `${((100 * s.errors) / Math.max(1, s.records - s.corrupt)).toFixed(2)}%` : "–"],
        ["Malformed", fmtInt(s.corrupt)],
        ["Last minute", lastMinute ? `${fmtInt(lastMinute.records)} records, ${(100 * lastMinute.error_rate).toFixed(1)}% errors` : "–"],
        ["Oldest", s.first ? fmtTime(s.first) : "–"],
        ["Newest", s.last ? fmtTime(s.last) : "–"],
        ["Size", `${fmtBytes(lake.bytes)} in ${fmtInt(lake.committed_files)} files`],
        ["Batches / files", `${fmtInt(lake.batches)} / ${fmtInt(lake.files)}${lake.files_pending ? ` (+${fmtInt(lake.files_pending)} to read)` : ""}`],
      ].map(([k, v]) => h("div", h("dt", k), h("dd", v))),
    );
    lakeFigures.hidden = !lake.available;
    lakeNote.textContent = lake.error ? lake.error : `Read from ${lake.path}`;
    if (lake.files_unreadable) lakeNote.textContent += ` · ${lake.files_unreadable} file(s) could not be read: ${lake.unreadable_error}`;
    lakeNote.classList.toggle("error", Boolean(lake.error));
    if (d.stream) {
      lagBox.replaceChildren(
        h("span.big", { id: "lag-value" }, d.ingest_lag === null ? "–" : fmtInt(d.ingest_lag)),
        h("span", ` offsets of stream ${d.stream.name} not yet in the lake`),
        h("small.muted", ` (stream ends at ${fmtInt(d.stream.end)}; ${lake.max_offset === null ? "the lake holds none of it" : `the lake holds up to ${fmtInt(lake.max_offset)}`})`),
      );
    } else {
      lagBox.replaceChildren(h("span.muted", "No stream feeds a lake here yet (leveret up, or leveret pipeline ingest, declares it)."));
    }
    const live = d.live;
    if (live) {
      drawStackedBars(liveCanvas, live.minutes, [...SEVERITIES, "unseen"].map((k) => ({ key: k, color: CHART_COLOURS[k] })), { minutes: 30 });
      const now = live.minutes[live.minutes.length - 1];
      const n = now ? SEVERITIES.reduce((a, k) => a + (now[k] || 0), 0) : 0;
      const errs = now ? (now.error || 0) + (now.critical || 0) : 0;
      liveFigures.replaceChildren(
        ...[
          ["Received", fmtInt(live.received)],
          ["Dropped by the broker", fmtInt(live.dropped_by_broker)],
          ["This minute", `${fmtInt(n)} received${now && now.unseen ? `, ${fmtInt(now.unseen)} unseen` : ""}`],
          ["Error rate (this minute)", n ? `${((100 * errs) / n).toFixed(1)}%` : "–"],
        ].map(([k, v]) => h("div", h("dt", k), h("dd", v))),
      );
    }
    if (lake.available && Date.now() - alertsAt > 10_000) {
      alertsAt = Date.now();
      // alerts are records of the lake: facility alert, severity warning
      api.get("/logs/search?facility=alert&severity=warning&since=1d&limit=5").then((a) => {
        alertsBox.replaceChildren(
          ...(a.records.length
            ? a.records.map((r) => h("p.alert", { dataset: { rule: (r.extra && r.extra.rule) || "" } }, h("small.muted", r.ts, " "), r.message))
            : [h("p.muted", "No alert in the last day.")]),
        );
      }, () => {});
    }
    const rep = d.report;
    if (rep.available) {
      reportBox.replaceChildren(
        h("p", link("/report", "Open the last report", { id: "report-open" }), h("span.muted", ` · made ${fmtTime(rep.modified)}`)),
      );
    } else {
      reportBox.replaceChildren(
        h("p.muted", "No report yet in ", h("code", rep.path), ". Make one with:"),
        h("pre.block", `leveret pipeline report --lake ${lake.path} --out ${rep.path}`),
      );
    }
  }

  function destroy() {
    destroyed = true;
    clearTimeout(retry);
    if (abort) abort.abort();
  }

  updateCounts();
  connect();

  return { title: "Logs", el, refresh, destroy, keys, interval: 2000 };
}
