// The Logs view's search of the lake: what the ingest committed, not only what arrives
// while the page is open. A time range, severities, app, host, facility and free text;
// newest first, a page at a time; a record's fields on click (the live view's drawer).
// GET /api/logs/search runs DuckDB over the lake's committed files.
"use strict";

import * as api from "./api.js";
import { fmtInt, h } from "./ui.js";

const SEVERITIES = ["debug", "info", "warning", "error", "critical"];
const PAGE = 100;

const sevClass = (s) => (SEVERITIES.includes(String(s || "").toLowerCase()) ? String(s).toLowerCase() : "info");

// a datetime-local value (no zone) read as UTC: the lake's times are UTC
const toIso = (v) => (v ? `${v}${v.length === 16 ? ":00" : ""}Z` : "");

export function lakeSearch(showDetail) {
  const form = {
    since: h("input#lake-since", { type: "datetime-local", step: 1, "aria-label": "From (UTC)", title: "From (UTC)" }),
    until: h("input#lake-until", { type: "datetime-local", step: 1, "aria-label": "Until (UTC)", title: "Until (UTC)" }),
    app: h("input#lake-app", { placeholder: "app", size: 10, "aria-label": "App" }),
    host: h("input#lake-host", { placeholder: "host", size: 10, "aria-label": "Host" }),
    facility: h("input#lake-facility", { placeholder: "facility", size: 8, "aria-label": "Facility" }),
    text: h("input#lake-text", { type: "search", placeholder: "Text in the message", "aria-label": "Text" }),
  };
  const severities = new Set(SEVERITIES);
  const chips = SEVERITIES.map((s) =>
    h(`button.chip.sev-chip.sev-${s}`, {
      type: "button", "aria-pressed": "true", dataset: { severity: s },
      onclick: (e) => {
        if (severities.has(s)) severities.delete(s);
        else severities.add(s);
        e.currentTarget.setAttribute("aria-pressed", String(severities.has(s)));
      },
    }, s),
  );
  const go = h("button#lake-go.primary", { type: "submit" }, "Search");
  const newer = h("button#lake-newer", { type: "button", disabled: true, onclick: () => run(offset - PAGE) }, "← Newer");
  const older = h("button#lake-older", { type: "button", disabled: true, onclick: () => run(offset + PAGE) }, "Older →");
  const status = h("span#lake-status.muted");
  const list = h("div#lake-results.log-list.lake-results", { role: "list", tabindex: "0" });
  let offset = 0;
  let selected = null;

  list.addEventListener("click", (e) => {
    const row = e.target.closest(".log-row");
    if (!row) return;
    if (selected) selected.classList.remove("selected");
    selected = row;
    row.classList.add("selected");
    showDetail(row._record);
  });

  function params(at) {
    const p = new URLSearchParams({ limit: String(PAGE), offset: String(at) });
    if (form.since.value) p.set("since", toIso(form.since.value));
    if (form.until.value) p.set("until", toIso(form.until.value));
    if (severities.size !== SEVERITIES.length) p.set("severity", [...severities].join(","));
    for (const k of ["app", "host", "facility"]) if (form[k].value.trim()) p.set(k, form[k].value.trim());
    if (form.text.value) p.set("q", form.text.value);
    return p;
  }

  function row(r) {
    const sev = sevClass(r.severity);
    const who = r.app && r.pid ? `${r.app}[${r.pid}]` : r.app || "";
    const meta = [r.facility, r.host, who].filter(Boolean).join(" ") + (r.logger ? " " + r.logger : "");
    const el = h(
      `div.log-row.sev-${sev}`,
      { role: "listitem", dataset: { severity: sev } },
      h("span.ts", r.ts || "(no time)"), " ",
      h("span.sev", (r.severity || "").toUpperCase().padEnd(8)), " ",
      h("span.meta", meta), ": ",
      h("span.msg", r.message ?? r._corrupt ?? ""),
    );
    if (r.exc) el.appendChild(h("div.exc", r.exc));
    el._record = { ...r, _lake: true };
    return el;
  }

  async function run(at) {
    if (severities.size === 0) {
      status.textContent = "Pick at least one severity.";
      return;
    }
    at = Math.max(0, at);
    go.disabled = true;
    status.textContent = "Searching…";
    try {
      const d = await api.get(`/logs/search?${params(at)}`);
      offset = d.offset;
      list.replaceChildren(...d.records.map(row));
      selected = null;
      list.scrollTop = 0;
      newer.disabled = offset === 0;
      older.disabled = !d.more;
      const first = d.records.length ? offset + 1 : offset;
      status.textContent = d.records.length
        ? `Records ${fmtInt(first)}–${fmtInt(offset + d.records.length)}${d.more ? "" : " (the last)"}, newest first · ${fmtInt(d.files)} files read in ${d.took_ms} ms`
        : "No record matches.";
      status.classList.remove("error");
    } catch (err) {
      status.textContent = err.message;
      status.classList.add("error");
    } finally {
      go.disabled = false;
    }
  }

  const el = h(
    "section#lake-search.card.lake-search",
    h("h2", "Search the lake"),
    h(
      "form.toolbar",
      { onsubmit: (e) => { e.preventDefault(); run(0); } },
      h("label.small", "From ", form.since), h("label.small", "until ", form.until, " UTC"),
      h("div.chips", { role: "group", "aria-label": "Severities to search" }, chips),
      form.app, form.host, form.facility, form.text, go,
    ),
    h("div.logs-statusbar", newer, older, status),
    list,
  );
  return { el, run };
}
