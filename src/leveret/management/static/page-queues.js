// Queues: the list with an add form, and a page per queue with its figures, consumers,
// bindings, get messages, purge, delete and add a binding; for a stream, its status.
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";
import { navigate } from "./nav.js";
import {
  Table, act, argumentsColumn, bindingForm, card, confirmDialog, declareForm, exchangeHref, exchangeLabel, features, field, figures,
  fmtBytes, fmtInt, fmtRate, h, input, link, listWithAddForm, queueHref, rate, select,
} from "./ui.js";

const queueType = (q) => q.type || (q.arguments && q.arguments["x-queue-type"]) || "classic";

export function queuesPage() {
  const table = new Table(
    [
      { key: "vhost", title: "Virtual host" },
      { key: "name", title: "Name", render: (q) => link(queueHref(q.vhost, q.name), q.name) },
      { key: "type", title: "Type", sort: queueType, render: queueType },
      { title: "Features", render: features },
      { key: "state", title: "State" },
      { key: "messages_ready", title: "Ready", num: true, render: (q) => fmtInt(q.messages_ready) },
      { key: "messages_unacknowledged", title: "Unacked", num: true, render: (q) => fmtInt(q.messages_unacknowledged) },
      { key: "messages", title: "Total", num: true, render: (q) => fmtInt(q.messages) },
      { title: "Incoming", num: true, render: (q) => fmtRate(rate(q.message_stats, "publish")) },
      { title: "Deliver / get", num: true, render: (q) => fmtRate(rate(q.message_stats, "deliver_get")) },
      { title: "Ack", num: true, render: (q) => fmtRate(rate(q.message_stats, "ack")) },
      { key: "consumers", title: "Consumers", num: true },
    ],
    { empty: "No queues.", rowKey: (q) => `${q.vhost}\u0000${q.name}`, id: "queues-table" },
  );
  const vhostSel = select("vhost", [], { id: "new-queue-vhost" });
  const form = declareForm(
    "form#add-queue.form-grid",
    {
      path: "/queues",
      noun: "Queue",
      body: (fd, args) => {
        if (fd.get("type") === "stream") args["x-queue-type"] = "stream";
        return { durable: fd.get("durable") === "true", auto_delete: fd.get("auto_delete") === "true", arguments: args };
      },
      after: () => page.refresh(),
      example: "x-max-length = 1000",
    },
    field("Virtual host", vhostSel),
    field("Type", select("type", [["classic", "Classic"], ["stream", "Stream"]])),
    field("Name", input("name", { required: true, id: "new-queue-name" })),
  );
  const page = listWithAddForm({ title: "Queues", what: "queues", path: "/queues", table, addTitle: "Add a queue", form, vhostSel });
  return page;
}

// ------------------------------------------------------------------ one queue
export function queuePage(vhost, name) {
  const base = `/queues/${enc(vhost)}/${enc(name)}`;
  const crumbs = [["/queues", "Queues"], [null, `virtual host ${vhost}`]];
  const figuresBox = h("div#queue-figures");
  const streamBox = h("div#stream-status");
  const streamCard = card("Stream", h("p.muted.small", "From the stream's status (rabbitmq-streams stream_status's figures, and the bytes of its segment files)."), streamBox);
  streamCard.hidden = true;
  const consumers = new Table(
    [
      { title: "Channel", render: (c) => (c.channel_details || {}).name },
      { key: "consumer_tag", title: "Consumer tag" },
      { title: "Ack required", render: (c) => (c.ack_required ? "yes" : "no") },
      { title: "Exclusive", render: (c) => (c.exclusive ? "yes" : "no") },
      { key: "prefetch_count", title: "Prefetch", num: true },
      argumentsColumn(),
    ],
    { empty: "No consumers.", id: "queue-consumers" },
  );
  const bindings = new Table(
    [
      { title: "From", render: (b) => (b.source === "" ? h("span.muted", "(AMQP default)") : link(exchangeHref(b.vhost, b.source), b.source)) },
      { key: "routing_key", title: "Routing key" },
      argumentsColumn(),
      {
        title: "",
        render: (b) =>
          b.source === ""
            ? h("span.muted.small", "default binding")
            : h("button.small", { type: "button", onclick: () => unbind(b) }, "Unbind"),
      },
    ],
    { empty: "No bindings.", id: "queue-bindings" },
  );

  const bindForm = bindingForm(
    "form#queue-bind.form-grid",
    {
      vhost,
      other: "source",
      where: (source) => [`e/${enc(source)}/q/${enc(name)}`, `Bound to ${source}`],
      after: refresh,
      keyId: "bind-key",
      example: "x-match = any",
      names: "exchange-names",
    },
    field("From exchange", input("source", { required: true, list: "exchange-names", id: "bind-source" })),
  );

  const results = h("div#get-results");
  const getForm = h(
    "form#get-messages.form-grid",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const fd = new FormData(getForm);
        const body = { count: Number(fd.get("count")) || 1, ackmode: fd.get("ackmode"), encoding: fd.get("encoding"), truncate: Number(fd.get("truncate")) || 50000 };
        const messages = await act(getForm, () => api.post(`${base}/get`, body));
        if (messages !== undefined) showMessages(messages);
        refresh();
      },
    },
    field("Ack mode", select("ackmode", [
      ["ack_requeue_true", "Nack message requeue true"],
      ["ack_requeue_false", "Automatic ack"],
      ["reject_requeue_true", "Reject requeue true"],
      ["reject_requeue_false", "Reject requeue false"],
    ], { id: "get-ackmode" })),
    field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]])),
    field("Messages", input("count", { type: "number", min: 1, value: "1", id: "get-count" })),
    field("Truncate at (bytes)", input("truncate", { type: "number", min: 1, value: "50000" })),
    h("div.form-actions", h("button.primary#get-submit", { type: "submit" }, "Get messages")),
  );

  const dangerBox = h(
    "div.danger-zone",
    h("div", h("button.danger#purge", { type: "button", onclick: () => purge() }, "Purge messages"), h("small.muted", " removes every ready message")),
    h(
      "div",
      h("label.inline", h("input#delete-if-empty", { type: "checkbox" }), " only if empty"),
      h("label.inline", h("input#delete-if-unused", { type: "checkbox" }), " only if unused"),
      h("button.danger#delete-queue", { type: "button", onclick: () => remove() }, "Delete queue"),
    ),
  );

  const getCard = card("Get messages", h("p.muted.small", "Getting messages is destructive with some ack modes; the requeue modes put them back, marked redelivered."), getForm, results);
  const el = h(
    "div.page",
    card("Figures", figuresBox),
    streamCard,
    h("div.grid2", card("Consumers", consumers.el), card("Bindings", bindings.el, h("h3", "Add a binding to this queue"), bindForm)),
    getCard,
    card("Purge or delete", dangerBox),
  );

  function showMessages(messages) {
    if (!messages.length) {
      results.replaceChildren(h("p.muted#get-empty", "Queue is empty."));
      return;
    }
    results.replaceChildren(
      ...messages.map((m, i) =>
        h(
          "div.message",
          h("h3", `Message ${i + 1}`),
          h(
            "table.kv",
            h(
              "tbody",
              [
                ["Exchange", exchangeLabel(m.exchange)],
                ["Routing key", m.routing_key],
                ["Redelivered", String(m.redelivered)],
                ["Properties", Array.isArray(m.properties) ? "" : JSON.stringify(m.properties)],
                ["Payload", `${fmtInt(m.payload_bytes)} bytes, encoding: ${m.payload_encoding}`],
                ["Left in queue", fmtInt(m.message_count)],
              ].map(([k, v]) => h("tr", h("th", k), h("td", v))),
            ),
          ),
          h("pre.block.payload", m.payload),
        ),
      ),
    );
  }

  async function unbind(b) {
    if (!(await confirmDialog("Unbind", `Remove the binding from ${b.source} with key "${b.routing_key}"?`, { okLabel: "Unbind" }))) return;
    const ok = await act(null, () => api.del(`/bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`), "Binding removed");
    if (ok !== undefined) refresh();
  }

  async function purge() {
    if (!(await confirmDialog("Purge queue", `Remove every ready message from ${name}?`, { okLabel: "Purge" }))) return;
    const ok = await act(null, () => api.del(`${base}/contents`), `Queue ${name} purged`);
    if (ok !== undefined) refresh();
  }

  async function remove() {
    if (!(await confirmDialog("Delete queue", `Delete queue ${name} in ${vhost}? Its messages go with it.`, { okLabel: "Delete" }))) return;
    const qs = new URLSearchParams();
    if (el.querySelector("#delete-if-empty").checked) qs.set("if-empty", "true");
    if (el.querySelector("#delete-if-unused").checked) qs.set("if-unused", "true");
    const ok = await act(null, () => api.del(`${base}${qs.toString() ? "?" + qs : ""}`), `Queue ${name} deleted`);
    if (ok !== undefined) navigate("/queues");
  }

  async function refresh() {
    const [q, bs, xs] = await Promise.all([api.get(base), api.get(`${base}/bindings`), api.get(`/exchanges/${enc(vhost)}?columns=name`)]);
    const stream = queueType(q) === "stream";
    const ms = q.message_stats || {};
    const pairs = [
      ["Type", queueType(q)],
      ["State", q.state],
      ["Features", h("span", features(q))],
      ["Consumers", fmtInt(q.consumers)],
    ];
    if (!stream) {
      pairs.push(
        ["Ready", fmtInt(q.messages_ready)],
        ["Unacked", fmtInt(q.messages_unacknowledged)],
        ["Total", fmtInt(q.messages)],
        ["Ready bytes", q.message_bytes_ready === undefined ? "" : fmtBytes(q.message_bytes_ready)],
      );
    }
    pairs.push(
      ["Incoming", fmtRate(rate(ms, "publish")), "publishes per second"],
      ["Deliver / get", fmtRate(rate(ms, "deliver_get"))],
      ["Ack", fmtRate(rate(ms, "ack"))],
    );
    if (q.owner_pid_details) pairs.push(["Exclusive owner", q.owner_pid_details.name]);
    figuresBox.replaceChildren(figures(pairs));
    streamCard.hidden = !stream;
    getCard.hidden = stream;
    el.querySelector("#purge").parentElement.hidden = stream; // streams refuse queue.purge
    if (stream) {
      const [row] = await api.get(`${base}/stream-status`);
      streamBox.replaceChildren(
        figures([
          ["First offset", fmtInt(row.first_offset)],
          ["Last offset", row.committed_offset < 0 ? "(empty)" : fmtInt(row.committed_offset), "the last committed (on disk)"],
          ["Segments", fmtInt(row.segments)],
          ["Size", fmtBytes(row.size)],
          ["Readers", fmtInt(row.readers)],
        ]),
      );
    }
    consumers.set(q.consumer_details || []);
    bindings.set(bs);
    const dl = el.querySelector("#exchange-names");
    dl.replaceChildren(...xs.filter((x) => x.name).map((x) => h("option", { value: x.name })));
  }

  function gone() {
    figuresBox.replaceChildren(h("p.error", `Queue ${name} does not exist in ${vhost} (any more).`));
  }

  return { title: `Queue ${name}`, crumbs, el, refresh, gone };
}
