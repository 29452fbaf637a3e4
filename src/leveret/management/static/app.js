// Leveret's dashboard: polls the management API and draws live charts on <canvas>.
// No libraries and nothing fetched from the internet.
"use strict";

const REFRESH_MS = Number(new URLSearchParams(location.search).get("refresh")) || 1000;
const KEEP_POINTS = 120;
const AUTH_KEY = "leveret-auth";

const $ = (sel) => document.querySelector(sel);

// ------------------------------------------------------------------ API access
let auth = sessionStorage.getItem(AUTH_KEY);

async function api(path) {
  const headers = { Accept: "application/json" };
  if (auth) headers.Authorization = "Basic " + auth;
  const resp = await fetch("/api" + path, { headers });
  if (resp.status === 401) {
    const err = new Error("unauthorised");
    err.status = 401;
    throw err;
  }
  if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}

// --------------------------------------------------------------------- charts
class LineChart {
  constructor(canvas, series) {
    this.canvas = canvas;
    this.series = series; // [{key, color}]
    this.points = []; // [{t, values: {key: number}}]
  }

  push(t, values) {
    this.points.push({ t, values });
    if (this.points.length > KEEP_POINTS) this.points.shift();
    this.canvas.dataset.points = String(this.points.length);
    this.canvas.dataset.last = JSON.stringify(values);
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const ctx = c.getContext("2d");
    const w = c.width, h = c.height;
    const left = 48, right = 8, top = 10, bottom = 22;
    ctx.clearRect(0, 0, w, h);
    let max = 0;
    for (const p of this.points) {
      for (const s of this.series) max = Math.max(max, p.values[s.key] || 0);
    }
    max = niceMax(max);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#667";
    ctx.strokeStyle = "#e3e7ec";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = top + ((h - top - bottom) * i) / 4;
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(w - right, y);
      ctx.stroke();
      ctx.fillText(formatNumber(max * (1 - i / 4)), 4, y + 4);
    }
    if (this.points.length < 2) return;
    const t0 = this.points[0].t, t1 = this.points[this.points.length - 1].t;
    const span = Math.max(t1 - t0, 1);
    ctx.fillText(`${Math.round(span / 1000)} s`, w - right - 30, h - 6);
    for (const s of this.series) {
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      this.points.forEach((p, i) => {
        const x = left + ((w - left - right) * (p.t - t0)) / span;
        const v = p.values[s.key] || 0;
        const y = top + (h - top - bottom) * (1 - (max ? v / max : 0));
        if (i === 0) ctx.moveTo(x, y);
        else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
  }
}

function niceMax(v) {
  if (v <= 0) return 1;
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * exp) return m * exp;
  return 10 * exp;
}

function formatNumber(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function rate(stats, key) {
  const d = stats && stats[key + "_details"];
  return d ? d.rate : 0;
}

const rates = new LineChart($("#chart-rates"), [
  { key: "publish", color: "#2f7ed8" },
  { key: "deliver", color: "#8bbc21" },
  { key: "ack", color: "#f28f43" },
  { key: "confirm", color: "#910000" },
]);
const queued = new LineChart($("#chart-queued"), [
  { key: "ready", color: "#2f7ed8" },
  { key: "unacked", color: "#f28f43" },
  { key: "total", color: "#555" },
]);

// --------------------------------------------------------------------- tables
function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (cls) td.className = cls;
  return td;
}

function fillTable(section, rows, render) {
  const tbody = document.querySelector(`#${section} tbody`);
  const fragment = document.createDocumentFragment();
  for (const row of rows) {
    const tr = document.createElement("tr");
    for (const td of render(row)) tr.appendChild(td);
    fragment.appendChild(tr);
  }
  tbody.replaceChildren(fragment);
}

function features(item) {
  const out = [];
  if (item.durable) out.push("D");
  if (item.auto_delete) out.push("AD");
  if (item.internal) out.push("I");
  if (item.exclusive) out.push("Excl");
  for (const k of Object.keys(item.arguments || {})) out.push(k);
  return out.join(" ");
}

const perSecond = (v) => `${(v || 0).toFixed(1)}/s`;

// -------------------------------------------------------------------- refresh
async function refresh() {
  const [overview, exchanges, queues, bindings, connections] = await Promise.all([
    api("/overview"),
    api("/exchanges"),
    api("/queues"),
    api("/bindings"),
    api("/connections"),
  ]);
  $("#node").textContent = `${overview.node} · RabbitMQ ${overview.rabbitmq_version} compatible`;
  const totals = overview.object_totals || {};
  const qt = overview.queue_totals || {};
  const ms = overview.message_stats || {};
  $("#tile-connections").textContent = totals.connections;
  $("#tile-channels").textContent = totals.channels;
  $("#tile-exchanges").textContent = totals.exchanges;
  $("#tile-queues").textContent = totals.queues;
  $("#tile-consumers").textContent = totals.consumers;
  $("#tile-ready").textContent = qt.messages_ready;
  $("#tile-unacked").textContent = qt.messages_unacknowledged;

  const now = Date.now();
  const r = {
    publish: rate(ms, "publish"),
    deliver: rate(ms, "deliver_get"),
    ack: rate(ms, "ack"),
    confirm: rate(ms, "confirm"),
  };
  rates.push(now, r);
  for (const k of Object.keys(r)) $(`#rate-${k}`).textContent = perSecond(r[k]);
  const q = {
    ready: qt.messages_ready || 0,
    unacked: qt.messages_unacknowledged || 0,
    total: qt.messages || 0,
  };
  queued.push(now, q);
  for (const k of Object.keys(q)) $(`#queued-${k}`).textContent = String(q[k]);

  fillTable("exchanges", exchanges, (x) => [
    cell(x.vhost), cell(x.name === "" ? "(AMQP default)" : x.name), cell(x.type),
    cell(features(x)),
  ]);
  fillTable("queues", queues, (x) => {
    const s = x.message_stats || {};
    return [
      cell(x.vhost), cell(x.name), cell(features(x)),
      cell(x.messages_ready, "num"), cell(x.messages_unacknowledged, "num"),
      cell(x.messages, "num"), cell(perSecond(rate(s, "publish")), "num"),
      cell(perSecond(rate(s, "deliver_get")), "num"), cell(perSecond(rate(s, "ack")), "num"),
      cell(x.consumers, "num"),
    ];
  });
  fillTable("bindings", bindings, (b) => [
    cell(b.vhost), cell(b.source === "" ? "(AMQP default)" : b.source), cell(b.destination),
    cell(b.destination_type), cell(b.routing_key), cell(JSON.stringify(b.arguments)),
  ]);
  fillTable("connections", connections, (c) => [
    cell(c.name), cell(c.user), cell(c.vhost), cell(c.state), cell(c.channels, "num"),
    cell((c.client_properties || {}).product || ""),
  ]);
  $("#status").textContent = `updated ${new Date(now).toLocaleTimeString()}`;
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

// The charts start with the history the server keeps (its rolling sample window), so
// a freshly opened page is not blank.
async function seed() {
  const age = "msg_rates_age=120&msg_rates_incr=1&lengths_age=120&lengths_incr=1";
  const o = await api("/overview?" + age);
  const ms = o.message_stats || {};
  const counters = { publish: "publish", deliver: "deliver_get", ack: "ack", confirm: "confirm" };
  const byTime = new Map();
  for (const [name, key] of Object.entries(counters)) {
    const samples = ((ms[key + "_details"] || {}).samples || []).slice().reverse();
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1], b = samples[i];
      const dt = (b.timestamp - a.timestamp) / 1000;
      if (dt <= 0) continue;
      const point = byTime.get(b.timestamp) || {};
      point[name] = Math.max(0, (b.sample - a.sample) / dt);
      byTime.set(b.timestamp, point);
    }
  }
  for (const [t, values] of [...byTime.entries()].sort((x, y) => x[0] - y[0])) {
    rates.points.push({ t, values });
  }
  const qt = o.queue_totals || {};
  const lengths = { ready: "messages_ready", unacked: "messages_unacknowledged", total: "messages" };
  const byTimeQ = new Map();
  for (const [name, key] of Object.entries(lengths)) {
    for (const s of (qt[key + "_details"] || {}).samples || []) {
      const point = byTimeQ.get(s.timestamp) || {};
      point[name] = s.sample;
      byTimeQ.set(s.timestamp, point);
    }
  }
  for (const [t, values] of [...byTimeQ.entries()].sort((x, y) => x[0] - y[0])) {
    queued.points.push({ t, values });
  }
  rates.points.splice(0, Math.max(0, rates.points.length - KEEP_POINTS));
  queued.points.splice(0, Math.max(0, queued.points.length - KEEP_POINTS));
}

let timer = null;
let seeded = false;

async function tick() {
  try {
    if (!seeded) {
      await seed();
      seeded = true;
    }
    await refresh();
    showApp();
  } catch (err) {
    if (err.status === 401) {
      showLogin(auth ? "Login failed" : "");
      return;
    }
    $("#status").textContent = `error: ${err.message}`;
  }
  timer = setTimeout(tick, REFRESH_MS);
}

function showApp() {
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#logout").hidden = false;
}

function showLogin(message) {
  clearTimeout(timer);
  $("#app").hidden = true;
  $("#logout").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message;
}

$("#login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  auth = btoa(`${$("#username").value}:${$("#password").value}`);
  sessionStorage.setItem(AUTH_KEY, auth);
  tick();
});

$("#logout").addEventListener("click", () => {
  auth = null;
  sessionStorage.removeItem(AUTH_KEY);
  showLogin("");
});

tick();
