// Exchanges: the list with an add form, and a page per exchange with its bindings (both
// ways), a form to bind from it, and a publish form.
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";
import { navigate } from "./nav.js";
import {
  Table, act, argumentsColumn, bindingForm, card, confirmDialog, declareForm, exchangeHref, exchangeLabel, features, field, figures,
  formArguments, h, input, link, listWithAddForm, queueHref, select, toast,
} from "./ui.js";

const TYPES = ["direct", "fanout", "topic", "headers", "x-consistent-hash", "x-delayed-message", "x-message-deduplication"];

export function exchangesPage() {
  const table = new Table(
    [
      { key: "vhost", title: "Virtual host" },
      { key: "name", title: "Name", render: (x) => link(exchangeHref(x.vhost, x.name), exchangeLabel(x.name)) },
      { key: "type", title: "Type" },
      { title: "Features", render: features },
      // x-delayed-message exchanges: the messages waiting in the schedule
      { key: "messages_delayed", title: "Delayed", render: (x) => (x.messages_delayed ?? "").toString() },
    ],
    { empty: "No exchanges.", rowKey: (x) => `${x.vhost}\u0000${x.name}`, id: "exchanges-table" },
  );
  const vhostSel = select("vhost", []);
  const form = declareForm(
    "form#add-exchange.form-grid",
    {
      path: "/exchanges",
      noun: "Exchange",
      body: (fd, args) => ({
        type: fd.get("type"), durable: fd.get("durable") === "true", auto_delete: fd.get("auto_delete") === "true",
        internal: fd.get("internal") === "true", arguments: args,
      }),
      after: () => page.refresh(),
      more: [field("Internal", select("internal", [["false", "No"], ["true", "Yes"]]))],
      example: "alternate-exchange = ae",
    },
    field("Virtual host", vhostSel),
    field("Name", input("name", { required: true })),
    field("Type", select("type", TYPES)),
  );
  const page = listWithAddForm({ title: "Exchanges", what: "exchanges", path: "/exchanges", table, addTitle: "Add an exchange", form, vhostSel });
  return page;
}

// --------------------------------------------------------------- one exchange
export function exchangePage(vhost, urlName) {
  const name = urlName === "amq.default" ? "" : urlName;
  const base = `/exchanges/${enc(vhost)}/${enc(urlName)}`;
  const builtIn = name === "" || name.startsWith("amq.");
  const crumbs = [["/exchanges", "Exchanges"], [null, `virtual host ${vhost}`]];
  const info = h("div#exchange-figures");
  const dest = (b) =>
    b.destination_type === "queue" ? link(queueHref(b.vhost, b.destination), b.destination) : link(exchangeHref(b.vhost, b.destination), exchangeLabel(b.destination));
  const outgoing = new Table(
    [
      { title: "To", render: dest },
      { key: "destination_type", title: "Kind" },
      { key: "routing_key", title: "Routing key" },
      argumentsColumn(),
      { title: "", render: (b) => (name === "" ? null : h("button.small", { type: "button", onclick: () => unbind(b) }, "Unbind")) },
    ],
    { empty: "Nothing is bound to this exchange.", id: "exchange-outgoing" },
  );
  const incoming = new Table(
    [
      { title: "From", render: (b) => link(exchangeHref(b.vhost, b.source), exchangeLabel(b.source)) },
      { key: "routing_key", title: "Routing key" },
      argumentsColumn(),
    ],
    { empty: "No exchange binds to this one.", id: "exchange-incoming" },
  );

  const bindForm = bindingForm(
    "form#exchange-bind.form-grid",
    {
      vhost,
      other: "destination",
      where: (to, fd) => [`e/${enc(name)}/${fd.get("kind")}/${enc(to)}`, `Bound ${to}`],
      after: refresh,
      names: "destination-names",
    },
    field("To", select("kind", [["q", "Queue"], ["e", "Exchange"]])),
    field("Name", input("destination", { required: true, list: "destination-names" })),
  );

  const publishResult = h("p#publish-result", { role: "status" });
  const publishForm = h(
    "form#publish.form-grid",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const fd = new FormData(publishForm);
        const headers = formArguments(fd, "headers");
        if (headers === undefined) return;
        const props = formArguments(fd, "properties");
        if (props === undefined) return;
        const properties = {};
        for (const [k, v] of Object.entries(props)) {
          properties[k] = ["priority", "timestamp", "delivery_mode"].includes(k) ? v : String(v);
        }
        if (fd.get("delivery_mode")) properties.delivery_mode = Number(fd.get("delivery_mode"));
        if (Object.keys(headers).length) properties.headers = headers;
        const body = {
          routing_key: fd.get("routing_key"), payload: fd.get("payload"), payload_encoding: fd.get("payload_encoding"), properties,
        };
        const res = await act(publishForm, () => api.post(`${base}/publish`, body));
        if (res !== undefined) {
          publishResult.textContent = res.routed ? "Message published." : "Message published, but not routed.";
          publishResult.className = res.routed ? "ok" : "warn";
          toast(publishResult.textContent, res.routed ? "ok" : "warn");
        }
      },
    },
    field("Routing key", input("routing_key", { id: "publish-key" })),
    field("Delivery mode", select("delivery_mode", [["1", "1 - Non-persistent"], ["2", "2 - Persistent"]])),
    field("Headers", h("textarea", { name: "headers", rows: 2, placeholder: "level = error" }), "key = value, one per line"),
    field("Properties", h("textarea", { name: "properties", rows: 2, placeholder: "content_type = text/plain" }), "content_type, message_id, app_id, …"),
    field("Payload", h("textarea#publish-payload", { name: "payload", rows: 4 }), null),
    field("Payload encoding", select("payload_encoding", [["string", "String"], ["base64", "Base64"]])),
    h("div.form-actions", h("button.primary#publish-submit", { type: "submit" }, "Publish message"), publishResult),
  );

  const deleteBox = h(
    "div.danger-zone",
    h(
      "div",
      h("label.inline", h("input#delete-if-unused", { type: "checkbox" }), " only if unused"),
      h("button.danger#delete-exchange", { type: "button", onclick: () => remove() }, "Delete exchange"),
    ),
  );

  const el = h(
    "div.page",
    card("Details", info),
    h("div.grid2", card("Bindings from this exchange", outgoing.el, name === "" ? h("p.muted.small", "The default exchange routes to every queue by its name.") : [h("h3", "Add a binding from this exchange"), bindForm]), card("Bindings to this exchange", incoming.el)),
    card("Publish message", publishForm),
    builtIn ? null : card("Delete", deleteBox),
  );

  async function unbind(b) {
    if (!(await confirmDialog("Unbind", `Remove the binding to ${b.destination} with key "${b.routing_key}"?`, { okLabel: "Unbind" }))) return;
    const kind = b.destination_type === "queue" ? "q" : "e";
    const ok = await act(null, () => api.del(`/bindings/${enc(vhost)}/e/${enc(name)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`), "Binding removed");
    if (ok !== undefined) refresh();
  }

  async function remove() {
    if (!(await confirmDialog("Delete exchange", `Delete exchange ${name} in ${vhost}?`, { okLabel: "Delete" }))) return;
    const qs = el.querySelector("#delete-if-unused").checked ? "?if-unused=true" : "";
    const ok = await act(null, () => api.del(`${base}${qs}`), `Exchange ${name} deleted`);
    if (ok !== undefined) navigate("/exchanges");
  }

  async function refresh() {
    const [x, out, inc, qs] = await Promise.all([
      api.get(base),
      api.get(`${base}/bindings/source`),
      api.get(`${base}/bindings/destination`),
      api.get(`/queues/${enc(vhost)}?columns=name`),
    ]);
    info.replaceChildren(
      figures([
        ["Type", x.type],
        ["Features", h("span", features(x))],
        ["Arguments", Object.keys(x.arguments || {}).length ? JSON.stringify(x.arguments) : "none"],
      ]),
    );
    outgoing.set(out);
    incoming.set(inc);
    const dl = el.querySelector("#destination-names");
    if (dl) dl.replaceChildren(...qs.map((q) => h("option", { value: q.name })));
  }

  function gone() {
    info.replaceChildren(h("p.error", `Exchange ${name} does not exist in ${vhost} (any more).`));
  }

  return { title: `Exchange ${exchangeLabel(name)}`, crumbs, el, refresh, gone };
}
