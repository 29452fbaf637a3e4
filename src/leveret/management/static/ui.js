// Small DOM helpers shared by the pages: element building, formatting, sortable tables,
// forms, toasts and confirmations. No libraries.
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";

/** h("tag.class#id", {attrs, on*: handlers}, ...children) */
export function h(spec, attrs, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(spec);
  const el = document.createElement((m && m[1]) || "div");
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === ".") el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "text") el.textContent = v;
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

// ------------------------------------------------------------------ formatting
export function fmtNumber(v) {
  if (v === undefined || v === null || v === "") return "";
  if (typeof v !== "number") return String(v);
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? v.toLocaleString("en") : v.toFixed(1);
}

export function fmtInt(v) {
  return v === undefined || v === null ? "" : Number(v).toLocaleString("en");
}

export function fmtBytes(v) {
  if (v === undefined || v === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let n = Number(v);
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export const fmtRate = (v) => `${(v || 0).toFixed(1)}/s`;

export function rate(stats, key) {
  const d = stats && stats[key + "_details"];
  return d ? d.rate : 0;
}

export function fmtTime(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function fmtDuration(ms) {
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const hh = Math.floor(s / 3600);
  s -= hh * 3600;
  const mm = Math.floor(s / 60);
  s -= mm * 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${mm}m`;
  if (mm) return `${mm}m ${s}s`;
  return `${s}s`;
}

export const vhostLabel = (v) => v;
export const exchangeLabel = (n) => (n === "" ? "(AMQP default)" : n);

/** The feature badges RabbitMQ's UI shows: D, AD, I, Excl and the arguments. */
export function features(item) {
  const out = [];
  const badge = (text, title) => h("span.badge", { title }, text);
  if (item.durable) out.push(badge("D", "durable"));
  if (item.auto_delete) out.push(badge("AD", "auto-delete"));
  if (item.internal) out.push(badge("I", "internal"));
  if (item.exclusive) out.push(badge("Excl", "exclusive"));
  for (const [k, v] of Object.entries(item.arguments || {})) {
    if (k === "x-queue-type") continue;
    out.push(badge(shortArg(k), `${k}: ${JSON.stringify(v)}`));
  }
  // the policies that apply, as RabbitMQ's UI shows them beside the features
  if (item.policy) out.push(h("span.badge.policy", { title: `policy ${item.policy}` }, item.policy));
  if (item.operator_policy) out.push(h("span.badge.policy", { title: `operator policy ${item.operator_policy}` }, item.operator_policy));
  return out;
}

const ARG_SHORT = {
  "x-message-ttl": "TTL", "x-expires": "Exp", "x-max-length": "Lim",
  "x-max-length-bytes": "Lim B", "x-dead-letter-exchange": "DLX",
  "x-dead-letter-routing-key": "DLK", "x-max-priority": "Pri", "x-overflow": "Ovfl",
  "alternate-exchange": "AE", "x-max-age": "MaxAge", "x-single-active-consumer": "SAC",
};
const shortArg = (k) => ARG_SHORT[k] || k;

// ---------------------------------------------------------------------- links
export function queueHref(vhost, name) {
  return `/queues/${encodeURIComponent(vhost)}/${encodeURIComponent(name)}`;
}

export function exchangeHref(vhost, name) {
  return `/exchanges/${encodeURIComponent(vhost)}/${encodeURIComponent(name || "amq.default")}`;
}

export function link(href, text, attrs = {}) {
  return h("a", { href, "data-nav": "", ...attrs }, text);
}

// --------------------------------------------------------------------- tables
/**
 * A table whose rows are re-rendered from data; click a header to sort. columns:
 * [{key, title, render(row) -> node|string, num, sort(row) -> value}]
 */
export class Table {
  constructor(columns, { empty = "Nothing here yet.", rowKey, id } = {}) {
    this.columns = columns;
    this.empty = empty;
    this.rowKey = rowKey;
    this.sortKey = null;
    this.sortDir = 1;
    this.rows = [];
    this.filterText = "";
    this.tbody = h("tbody");
    const head = h("tr");
    for (const col of columns) {
      const th = h(col.num ? "th.num" : "th", { scope: "col" }, col.title);
      if (col.key) {
        th.tabIndex = 0;
        th.classList.add("sortable");
        const sort = () => this.sortBy(col.key);
        th.addEventListener("click", sort);
        th.addEventListener("keydown", (e) => {
          if (e.key === "Enter" || e.key === " ") {
            e.preventDefault();
            sort();
          }
        });
      }
      head.appendChild(th);
    }
    this.el = h("div.table-wrap", h("table", { id }, h("thead", head), this.tbody));
    this.foot = h("p.table-foot.muted");
    this.el.appendChild(this.foot);
  }

  sortBy(key) {
    if (this.sortKey === key) this.sortDir = -this.sortDir;
    else {
      this.sortKey = key;
      this.sortDir = 1;
    }
    for (const [i, th] of [...this.el.querySelectorAll("th")].entries()) {
      const col = this.columns[i];
      th.dataset.sort = col.key === this.sortKey ? (this.sortDir > 0 ? "asc" : "desc") : "";
    }
    this.render();
  }

  filter(text) {
    this.filterText = text.toLowerCase();
    this.render();
  }

  set(rows) {
    this.rows = rows;
    this.render();
  }

  render() {
    let rows = this.rows;
    if (this.filterText) {
      rows = rows.filter((r) =>
        this.columns.some((c) => c.key && String(value(c, r)).toLowerCase().includes(this.filterText)),
      );
    }
    if (this.sortKey) {
      const col = this.columns.find((c) => c.key === this.sortKey);
      rows = [...rows].sort((a, b) => {
        const x = value(col, a), y = value(col, b);
        if (typeof x === "number" && typeof y === "number") return (x - y) * this.sortDir;
        return String(x).localeCompare(String(y)) * this.sortDir;
      });
    }
    const frag = document.createDocumentFragment();
    for (const row of rows) {
      const tr = h("tr");
      if (this.rowKey) tr.dataset.key = this.rowKey(row);
      for (const col of this.columns) {
        const content = col.render ? col.render(row) : row[col.key];
        const td = h(col.num ? "td.num" : "td");
        if (content instanceof Node || Array.isArray(content)) append(td, [content]);
        else td.textContent = content === undefined || content === null ? "" : String(content);
        tr.appendChild(td);
      }
      frag.appendChild(tr);
    }
    if (!rows.length) {
      frag.appendChild(h("tr.empty", h("td", { colSpan: this.columns.length }, this.empty)));
    }
    this.tbody.replaceChildren(frag);
    this.foot.textContent =
      this.rows.length && rows.length !== this.rows.length
        ? `${rows.length} of ${this.rows.length} shown`
        : "";
  }
}

function value(col, row) {
  if (col.sort) return col.sort(row);
  const v = row[col.key];
  return v === undefined || v === null ? "" : v;
}

// ---------------------------------------------------------------------- cards
export function card(title, ...children) {
  return h("section.card", title ? h("h2", title) : null, ...children);
}

export function figures(pairs) {
  return h(
    "dl.figures",
    pairs.map(([label, val, title]) => h("div", { title }, h("dt", label), h("dd", val))),
  );
}

/** The add form of exchanges and queues: the fields given (a "vhost" and a "name" among
 * them), durability and auto delete, the ``more`` fields, and the arguments as "key = value"
 * rows (``example`` as placeholder). It declares by PUT at `${path}/{vhost}/{name}` with
 * ``body(fd, args)``. */
export function declareForm(spec, { path, noun, body, after, more = [], example }, ...fields) {
  return actionForm(
    spec,
    {
      action: (fd) => {
        const name = String(fd.get("name")).trim();
        const args = formArguments(fd);
        if (args === undefined) return undefined;
        const declared = body(fd, args);
        return [() => api.put(`${path}/${enc(fd.get("vhost"))}/${enc(name)}`, declared), `${noun} ${name} declared`];
      },
      after,
      reset: true,
    },
    ...fields,
    field("Durability", select("durable", [["true", "Durable"], ["false", "Transient"]])),
    field("Auto delete", select("auto_delete", [["false", "No"], ["true", "Yes"]])),
    ...more,
    field("Arguments", h("textarea", { name: "arguments", rows: 2, placeholder: example }), "key = value, one per line"),
    h("div.form-actions", h("button.primary", { type: "submit" }, `Add ${noun.toLowerCase()}`)),
  );
}

/** A form that adds a binding: the fields given, the routing key (``keyId`` its id) and
 * the arguments (``example`` as placeholder), and a datalist ``#<names>`` for the name
 * field to offer. ``where(other, fd)``, given the trimmed name in the field ``other`` (the
 * binding's other end), gives the path under /bindings/{vhost}/ and the text to show once
 * bound. */
export function bindingForm(spec, { vhost, other, where, after, keyId, example, names }, ...fields) {
  return actionForm(
    spec,
    {
      action: (fd) => {
        const args = formArguments(fd);
        if (args === undefined) return undefined;
        const [path, bound] = where(String(fd.get(other)).trim(), fd);
        return [() => api.post(`/bindings/${enc(vhost)}/${path}`, { routing_key: fd.get("routing_key"), arguments: args }), bound];
      },
      after,
      reset: true,
    },
    ...fields,
    field("Routing key", input("routing_key", { id: keyId })),
    field("Arguments", h("textarea", { name: "arguments", rows: 1, placeholder: example })),
    h(`datalist#${names}`),
    h("div.form-actions", h("button.primary", { type: "submit" }, "Bind")),
  );
}

/** A table column of each row's arguments as JSON (empty when it has none). */
export function argumentsColumn() {
  return { title: "Arguments", render: (x) => (Object.keys(x.arguments || {}).length ? JSON.stringify(x.arguments) : "") };
}

/** The search box over a table: "Filter <what>  ( / )" (the / key focuses it). */
export function tableFilter(table, what) {
  const box = h("input.filter", { type: "search", placeholder: `Filter ${what}  ( / )`, "data-search": "", "aria-label": `Filter ${what}`, oninput: () => table.filter(box.value) });
  return box;
}

/** A list with an add form (exchanges, queues): the table under its heading and filter
 * box, the form folded below it; refresh() shows `path`'s rows and offers the virtual
 * hosts in `vhostSel`. */
export function listWithAddForm({ title, what, path, table, addTitle, form, vhostSel }) {
  const el = h(
    "div.page",
    card(null, h("div.card-head", h("h2", title), tableFilter(table, what)), table.el),
    h("details.card.collapsible", h("summary", h("h2", addTitle)), form),
  );
  async function refresh() {
    const [rows, vhosts] = await Promise.all([api.get(path), api.get("/vhosts?columns=name")]);
    table.set(rows);
    setOptions(vhostSel, vhosts.map((v) => v.name));
  }
  return { title, el, refresh };
}

// ---------------------------------------------------------------------- forms
export function field(label, input, hint) {
  return h("label.field", h("span.label", label), input, hint ? h("small.hint", hint) : null);
}

export function input(name, attrs = {}) {
  return h("input", { name, id: attrs.id || undefined, autocomplete: "off", ...attrs });
}

export function select(name, options, attrs = {}) {
  const el = h("select", { name, ...attrs });
  setOptions(el, options);
  return el;
}

export function setOptions(el, options, keep = true) {
  const current = el.value;
  el.replaceChildren(
    ...options.map((o) => {
      const [value, label] = Array.isArray(o) ? o : [o, o];
      return h("option", { value }, label);
    }),
  );
  if (keep && options.some((o) => (Array.isArray(o) ? o[0] : o) === current)) el.value = current;
}

/** Arguments typed as RabbitMQ's UI has them: rows of key = value, numbers as numbers. */
export function parseArguments(text) {
  const out = {};
  for (const line of String(text || "").split("\n")) {
    if (!line.trim()) continue;
    const i = line.indexOf("=");
    if (i < 0) throw new Error(`"${line.trim()}" is not key = value`);
    const key = line.slice(0, i).trim();
    const raw = line.slice(i + 1).trim();
    let v = raw;
    if (/^-?\d+$/.test(raw)) v = Number(raw);
    else if (raw === "true" || raw === "false") v = raw === "true";
    out[key] = v;
  }
  return out;
}

/** Run an action from a form: disable it meanwhile, show the outcome as a toast. */
export async function act(form, fn, success) {
  const buttons = form ? $$("button", form) : [];
  buttons.forEach((b) => (b.disabled = true));
  try {
    const result = await fn();
    if (success) toast(typeof success === "function" ? success(result) : success, "ok");
    return result;
  } catch (err) {
    toast(err.message || String(err), "error");
    return undefined;
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

/** The "key = value" rows of a form's field (see parseArguments), or undefined when they
 * do not parse: a toast says why. */
export function formArguments(fd, name = "arguments") {
  try {
    return parseArguments(fd.get(name));
  } catch (err) {
    toast(err.message, "error");
    return undefined;
  }
}

/** A form that runs an action when submitted: ``action(fd)`` gives act's ``[fn, success]``
 * (or nothing, to do nothing); after a success the form is reset when ``reset`` is set and
 * ``after`` runs. */
export function actionForm(spec, { action, after, reset = false }, ...children) {
  const form = h(
    spec,
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const todo = action(new FormData(form));
        if (!todo) return;
        const ok = await act(form, ...todo);
        if (ok === undefined) return;
        if (reset) form.reset();
        after();
      },
    },
    ...children,
  );
  return form;
}

// --------------------------------------------------------------------- toasts
export function toast(text, kind = "ok") {
  const box = $("#toasts");
  const el = h(`div.toast.${kind}`, { role: kind === "error" ? "alert" : "status" }, text);
  box.appendChild(el);
  setTimeout(() => el.classList.add("leaving"), kind === "error" ? 7000 : 3500);
  setTimeout(() => el.remove(), kind === "error" ? 7600 : 4100);
}

/** A modal confirmation; resolves true or false. */
export function confirmDialog(title, text, { danger = true, okLabel = "Confirm" } = {}) {
  return new Promise((resolve) => {
    const dlg = $("#confirm");
    $("#confirm-title").textContent = title;
    $("#confirm-text").textContent = text;
    const ok = $("#confirm-ok");
    ok.textContent = okLabel;
    ok.classList.toggle("danger", danger);
    const done = (v) => {
      dlg.close();
      resolve(v);
    };
    ok.onclick = () => done(true);
    $("#confirm-cancel").onclick = () => done(false);
    dlg.oncancel = () => resolve(false);
    dlg.showModal();
    $("#confirm-cancel").focus();
  });
}

export function emptyNote(text) {
  return h("p.muted.empty-note", text);
}
