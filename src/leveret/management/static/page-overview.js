// Overview: totals, live message rates and queued messages, the node and its listeners.
"use strict";

import * as api from "./api.js";
import { LineChart } from "./charts.js";
import { Table, card, fmtBytes, fmtDuration, fmtInt, fmtRate, h, rate } from "./ui.js";

const RATE_SERIES = [
  ["publish", "Publish", "#2f7ed8", "publish"],
  ["deliver", "Deliver", "#8bbc21", "deliver_get"],
  ["ack", "Ack", "#f28f43", "ack"],
  ["confirm", "Confirm", "#910000", "confirm"],
];
const QUEUED_SERIES = [
  ["ready", "Ready", "#2f7ed8", "messages_ready"],
  ["unacked", "Unacked", "#f28f43", "messages_unacknowledged"],
  ["total", "Total", "#555", "messages"],
];

function legend(series, prefix, fmt) {
  return h(
    "ul.legend",
    series.map(([key, label, color]) =>
      h("li", h("i", { style: `background:${color}` }), label, " ", h(`b#${prefix}-${key}`, fmt(0))),
    ),
  );
}

export function overviewPage() {
  const tiles = ["connections", "channels", "exchanges", "queues", "consumers", "ready", "unacked"];
  const tileLabels = {
    connections: "Connections", channels: "Channels", exchanges: "Exchanges", queues: "Queues",
    consumers: "Consumers", ready: "Ready", unacked: "Unacked",
  };
  const tileHref = { connections: "/connections", channels: "/channels", exchanges: "/exchanges", queues: "/queues" };
  const ratesCanvas = h("canvas#chart-rates.chart", { width: 560, height: 220 });
  const queuedCanvas = h("canvas#chart-queued.chart", { width: 560, height: 220 });
  const rates = new LineChart(ratesCanvas, RATE_SERIES.map(([key, , color]) => ({ key, color })));
  const queued = new LineChart(queuedCanvas, QUEUED_SERIES.map(([key, , color]) => ({ key, color })));
  const nodeBox = h("dl.figures");
  const listeners = new Table(
    [
      { key: "protocol", title: "Protocol" },
      { key: "ip_address", title: "Bound to" },
      { key: "port", title: "Port", num: true },
    ],
    { empty: "No listeners." },
  );

  const el = h(
    "div.page",
    h(
      "div.tiles",
      tiles.map((t) => {
        const inner = [h("span.label", tileLabels[t]), h(`span#tile-${t}.value`, "–")];
        return tileHref[t] ? h("a.tile", { href: tileHref[t], "data-nav": "" }, inner) : h("div.tile", inner);
      }),
    ),
    h(
      "div.grid2",
      card("Message rates", ratesCanvas, legend(RATE_SERIES, "rate", fmtRate)),
      card("Queued messages", queuedCanvas, legend(QUEUED_SERIES, "queued", (v) => String(v))),
    ),
    h("div.grid2", card("Node", nodeBox), card("Listeners", listeners.el)),
  );

  let seeded = false;

  // The charts start with the history the server keeps (its rolling window of samples),
  // so a freshly opened page is not blank.
  async function seed() {
    const age = "msg_rates_age=120&msg_rates_incr=1&lengths_age=120&lengths_incr=1";
    const o = await api.get("/overview?" + age);
    const ms = o.message_stats || {};
    const byTime = new Map();
    for (const [name, , , key] of RATE_SERIES) {
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
    for (const [t, values] of [...byTime.entries()].sort((x, y) => x[0] - y[0])) rates.points.push({ t, values });
    const qt = o.queue_totals || {};
    const byTimeQ = new Map();
    for (const [name, , , key] of QUEUED_SERIES) {
      for (const s of (qt[key + "_details"] || {}).samples || []) {
        const point = byTimeQ.get(s.timestamp) || {};
        point[name] = s.sample;
        byTimeQ.set(s.timestamp, point);
      }
    }
    for (const [t, values] of [...byTimeQ.entries()].sort((x, y) => x[0] - y[0])) queued.points.push({ t, values });
    rates.points.splice(0, Math.max(0, rates.points.length - 120));
    queued.points.splice(0, Math.max(0, queued.points.length - 120));
  }

  async function refresh() {
    if (!seeded) {
      await seed();
      seeded = true;
    }
    const [o, nodes] = await Promise.all([api.get("/overview"), api.get("/nodes")]);
    const totals = o.object_totals || {};
    const qt = o.queue_totals || {};
    const ms = o.message_stats || {};
    const values = {
      connections: totals.connections, channels: totals.channels, exchanges: totals.exchanges,
      queues: totals.queues, consumers: totals.consumers, ready: qt.messages_ready,
      unacked: qt.messages_unacknowledged,
    };
    for (const t of tiles) el.querySelector(`#tile-${t}`).textContent = fmtInt(values[t] || 0);
    const now = Date.now();
    const r = {};
    for (const [key, , , stat] of RATE_SERIES) r[key] = rate(ms, stat);
    rates.push(now, r);
    for (const k of Object.keys(r)) el.querySelector(`#rate-${k}`).textContent = fmtRate(r[k]);
    const q = {};
    for (const [key, , , stat] of QUEUED_SERIES) q[key] = qt[stat] || 0;
    queued.push(now, q);
    for (const k of Object.keys(q)) el.querySelector(`#queued-${k}`).textContent = String(q[k]);
    const n = nodes[0] || {};
    nodeBox.replaceChildren(
      ...[
        ["Node", o.node],
        ["Product", `${o.product_name} (RabbitMQ ${o.rabbitmq_version} compatible)`],
        ["Uptime", n.uptime ? fmtDuration(n.uptime) : ""],
        ["Memory", n.mem_used ? `${fmtBytes(n.mem_used)}${n.mem_alarm ? " — alarm" : ""}` : ""],
        ["Processors", n.processors],
        ["Cluster", o.cluster_name],
      ].map(([k, v]) => h("div", h("dt", k), h("dd", v === undefined ? "" : String(v)))),
    );
    listeners.set(o.listeners || []);
  }

  return { title: "Overview", el, refresh, interval: undefined };
}
