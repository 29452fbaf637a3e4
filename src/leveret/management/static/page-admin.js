// Admin: users, virtual hosts, permissions, topic permissions, policies and limits. Each tab
// is one entry of ADMIN_TABS (id, title, make).
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";
import { Table, act, actionForm, card, confirmDialog, field, fmtInt, h, input, link, parseArguments, select, setOptions } from "./ui.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];

export const ADMIN_TABS = [
  { id: "users", title: "Users", make: usersTab },
  { id: "vhosts", title: "Virtual hosts", make: vhostsTab },
  { id: "permissions", title: "Permissions", make: permissionsTab },
  { id: "topic-permissions", title: "Topic permissions", make: topicPermissionsTab },
  { id: "policies", title: "Policies", make: policiesTab },
  { id: "limits", title: "Limits", make: limitsTab },
];

export function adminPage(tabId, whoami) {
  const tab = ADMIN_TABS.find((t) => t.id === tabId) || ADMIN_TABS[0];
  const tabs = h(
    "nav.tabs",
    { "aria-label": "Admin" },
    ADMIN_TABS.map((t) => link(`/admin/${t.id}`, t.title, { class: t === tab ? "tab active" : "tab", "aria-current": t === tab ? "page" : null })),
  );
  if (whoami && !(whoami.tags || []).includes("administrator")) {
    return { title: "Admin", el: h("div.page", card(null, h("p", "Only administrators manage users, virtual hosts, permissions, policies and limits."))) };
  }
  const body = tab.make();
  return { title: `Admin · ${tab.title}`, crumbs: [["/admin", "Admin"]], el: h("div.page", tabs, body.el), refresh: body.refresh };
}

/** A row of chips, one per item; a click on one calls pick(item). */
function chipPicker(items, pick) {
  return h(
    "div.tag-picker",
    items.map((item) => h("button.chip.small", { type: "button", onclick: () => pick(item) }, item)),
  );
}

function tagPicker(inputEl) {
  return chipPicker(TAGS, (t) => {
    const tags = inputEl.value.split(",").map((s) => s.trim()).filter(Boolean);
    inputEl.value = (tags.includes(t) ? tags.filter((x) => x !== t) : [...tags, t]).join(", ");
  });
}

// ---------------------------------------------------------------------- users
function usersTab() {
  let perms = [];
  const table = new Table(
    [
      { key: "name", title: "Name" },
      { title: "Tags", sort: (u) => (u.tags || []).join(","), render: (u) => h("span", (u.tags || []).map((t) => h("span.badge", t))) },
      { title: "Can access virtual hosts", render: (u) => perms.filter((p) => p.user === u.name).map((p) => p.vhost).join(", ") || h("span.muted", "none") },
      { title: "Has password", render: (u) => (u.password_hash ? "●" : "○") },
      { title: "", render: (u) => h("button.small", { type: "button", onclick: () => removeUser(u) }, "Delete") },
    ],
    { empty: "No users.", id: "users-table", rowKey: (u) => u.name },
  );
  const tagsIn = input("tags", { id: "user-tags", placeholder: "management" });
  const form = actionForm(
    "form#add-user.form-grid",
    {
      action: (fd) => {
        const name = String(fd.get("username")).trim();
        const body = { tags: String(fd.get("tags")) };
        if (fd.get("password")) body.password = fd.get("password");
        return [() => api.put(`/users/${enc(name)}`, body), `User ${name} saved`];
      },
      after: refresh,
      reset: true,
    },
    field("Username", input("username", { required: true, id: "user-name" })),
    field("Password", input("password", { type: "password", id: "user-password", autocomplete: "new-password" }), "leave empty for a user who cannot log in with one"),
    field("Tags", h("div", tagsIn, tagPicker(tagsIn)), "comma-separated"),
    h("div.form-actions", h("button.primary#user-submit", { type: "submit" }, "Add or update user")),
  );
  async function removeUser(u) {
    if (!(await confirmDialog("Delete user", `Delete user ${u.name} and their permissions?`, { okLabel: "Delete" }))) return;
    const ok = await act(null, () => api.del(`/users/${enc(u.name)}`), `User ${u.name} deleted`);
    if (ok !== undefined) refresh();
  }
  async function refresh() {
    const [users, p] = await Promise.all([api.get("/users"), api.get("/permissions")]);
    perms = p;
    table.set(users);
  }
  const filterBox = h("input.filter", { type: "search", placeholder: "Filter users  ( / )", "data-search": "", oninput: () => table.filter(filterBox.value) });
  return { el: h("div.page", card(null, h("div.card-head", h("h2", "Users"), filterBox), table.el), card("Add or update a user", form)), refresh };
}

// --------------------------------------------------------------------- vhosts
function vhostsTab() {
  // a vhost that has had no queue has no message counts (as RabbitMQ's): shown and
  // sorted as zero
  const table = new Table(
    [
      { key: "name", title: "Name" },
      { key: "description", title: "Description" },
      { title: "Tags", render: (v) => h("span", (v.tags || []).map((t) => h("span.badge", t))) },
      { key: "messages_ready", title: "Ready", num: true, render: (v) => fmtInt(v.messages_ready || 0), sort: (v) => v.messages_ready || 0 },
      { key: "messages_unacknowledged", title: "Unacked", num: true, render: (v) => fmtInt(v.messages_unacknowledged || 0), sort: (v) => v.messages_unacknowledged || 0 },
      { key: "messages", title: "Total", num: true, render: (v) => fmtInt(v.messages || 0), sort: (v) => v.messages || 0 },
      { title: "", render: (v) => h("button.small", { type: "button", onclick: () => removeVhost(v) }, "Delete") },
    ],
    { empty: "No virtual hosts.", id: "vhosts-table", rowKey: (v) => v.name },
  );
  const form = actionForm(
    "form#add-vhost.form-grid",
    {
      action: (fd) => {
        const name = String(fd.get("name")).trim();
        return [() => api.put(`/vhosts/${enc(name)}`, { description: fd.get("description"), tags: fd.get("tags") }), `Virtual host ${name} saved`];
      },
      after: refresh,
      reset: true,
    },
    field("Name", input("name", { required: true, id: "vhost-name" })),
    field("Description", input("description")),
    field("Tags", input("tags"), "comma-separated"),
    h("div.form-actions", h("button.primary", { type: "submit" }, "Add or update virtual host")),
  );
  async function removeVhost(v) {
    if (!(await confirmDialog("Delete virtual host", `Delete ${v.name} with every exchange, queue and message in it?`, { okLabel: "Delete" }))) return;
    const ok = await act(null, () => api.del(`/vhosts/${enc(v.name)}`), `Virtual host ${v.name} deleted`);
    if (ok !== undefined) refresh();
  }
  async function refresh() {
    table.set(await api.get("/vhosts"));
  }
  return { el: h("div.page", card("Virtual hosts", table.el), card("Add or update a virtual host", form)), refresh };
}

// ---------------------------------------------------------------- permissions
function permissionsTab() {
  return grantTab({
    name: "permission",
    idPrefix: "perm",
    fields: [
      ["configure", "Configure", field("Configure regexp", input("configure", { value: ".*" }))],
      ["write", "Write", field("Write regexp", input("write", { value: ".*" }))],
      ["read", "Read", field("Read regexp", input("read", { value: ".*" }))],
    ],
    empty: "No permissions.",
    rowKey: (p) => `${p.user}\u0000${p.vhost}`,
    clearing: ["Clear permission", "Permission cleared"],
  });
}

// ---------------------------------------------------------- topic permissions
function topicPermissionsTab() {
  return grantTab({
    name: "topic-permission",
    idPrefix: "topic",
    fields: [
      ["exchange", "Exchange", field("Topic exchange", input("exchange", { value: "amq.topic", required: true, id: "topic-exchange" }))],
      ["write", "Write (publish) regexp", field("Write regexp", input("write", { value: ".*", id: "topic-write" }), "routing keys the user may publish with; {username} and {vhost} are filled in")],
      ["read", "Read (bind) regexp", field("Read regexp", input("read", { value: ".*", id: "topic-read" }), "routing keys the user may bind with")],
    ],
    empty: "No topic permissions: every routing key is allowed.",
    rowKey: (p) => `${p.user}\u0000${p.vhost}\u0000${p.exchange}`,
    clearing: ["Clear topic permissions", "Topic permissions cleared"],
  });
}

// Permissions and topic permissions are one kind of tab. A row is a user's grant in a
// virtual host, with a Clear button; a form of the user, the vhost and the grant's fields
// ([key, column title, form field]) sets one with PUT at /<name>s/{vhost}/{user}, Clear
// deletes it there. The name gives the path, the element ids and the texts.
function grantTab({ name, idPrefix, fields, empty, rowKey, clearing }) {
  const noun = name.replace("-", " ");
  const Noun = noun[0].toUpperCase() + noun.slice(1);
  const path = `/${name}s`;
  const table = new Table(
    [
      { key: "user", title: "User" },
      { key: "vhost", title: "Virtual host" },
      ...fields.map(([key, title]) => ({ key, title })),
      { title: "", render: (p) => h("button.small", { type: "button", onclick: () => clear(p) }, "Clear") },
    ],
    { empty, id: `${name}s-table`, rowKey },
  );
  const userSel = select("user", [], { id: `${idPrefix}-user` });
  const vhostSel = select("vhost", [], { id: `${idPrefix}-vhost` });
  const form = actionForm(
    `form#set-${name}.form-grid`,
    {
      action: (fd) => {
        const body = Object.fromEntries(fields.map(([key]) => [key, fd.get(key)]));
        return [() => api.put(`${path}/${enc(fd.get("vhost"))}/${enc(fd.get("user"))}`, body), `${Noun} set`];
      },
      after: refresh,
    },
    field("User", userSel),
    field("Virtual host", vhostSel),
    ...fields.map(([, , formField]) => formField),
    h("div.form-actions", h(`button.primary#${idPrefix}-submit`, { type: "submit" }, `Set ${noun}`)),
  );
  async function clear(p) {
    const [title, cleared] = clearing;
    if (!(await confirmDialog(title, `Remove ${p.user}'s ${noun}s in ${p.vhost}?`, { okLabel: "Clear" }))) return;
    const ok = await act(null, () => api.del(`${path}/${enc(p.vhost)}/${enc(p.user)}`), cleared);
    if (ok !== undefined) refresh();
  }
  async function refresh() {
    const [grants, users, vhosts] = await Promise.all([api.get(path), api.get("/users"), api.get("/vhosts?columns=name")]);
    table.set(grants);
    setOptions(userSel, users.map((u) => u.name));
    setOptions(vhostSel, vhosts.map((v) => v.name));
  }
  return { el: h("div.page", card(`${Noun}s`, table.el), card(`Set a ${noun}`, form)), refresh };
}

// ------------------------------------------------------------------- policies
const POLICY_KEYS = [
  "max-length", "max-length-bytes", "overflow", "message-ttl", "expires", "dead-letter-exchange",
  "dead-letter-routing-key", "queue-mode", "delivery-limit", "max-age",
  "stream-max-segment-size-bytes", "alternate-exchange",
];
const OPERATOR_KEYS = ["max-length", "max-length-bytes", "message-ttl", "expires", "delivery-limit"];

function definitionText(def) {
  return Object.entries(def || {}).map(([k, v]) => `${k} = ${v}`).join("\n");
}

function keyPicker(textarea, keys) {
  return chipPicker(keys, (k) => {
    const lines = textarea.value.split("\n").filter((l) => l.trim());
    if (!lines.some((l) => l.split("=")[0].trim() === k)) lines.push(`${k} = `);
    textarea.value = lines.join("\n");
    textarea.focus();
  });
}

/** One kind of policy (policies, or operator policies): its table and its form. */
function policySection(kind) {
  const operator = kind === "operator";
  const path = operator ? "/operator-policies" : "/policies";
  const prefix = operator ? "op-policy" : "policy";
  const table = new Table(
    [
      { key: "vhost", title: "Virtual host" },
      { key: "name", title: "Name" },
      { key: "pattern", title: "Pattern" },
      { key: "apply-to", title: "Apply to" },
      { title: "Definition", sort: (p) => JSON.stringify(p.definition), render: (p) => h("span", Object.entries(p.definition || {}).map(([k, v]) => h("span.badge", { title: `${k}: ${JSON.stringify(v)}` }, `${k}: ${v}`))) },
      { key: "priority", title: "Priority", num: true },
      {
        title: "",
        render: (p) => h("span", h("button.small", { type: "button", onclick: () => edit(p) }, "Edit"), " ", h("button.small", { type: "button", onclick: () => remove(p) }, "Delete")),
      },
    ],
    { empty: operator ? "No operator policies." : "No policies.", id: `${prefix}-table`, rowKey: (p) => `${p.vhost}\u0000${p.name}` },
  );
  const vhostSel = select("vhost", [], { id: `${prefix}-vhost` });
  const applySel = select("apply-to", [["all", "Exchanges and queues"], ["queues", "Queues"], ["exchanges", "Exchanges"]], { id: `${prefix}-apply-to` });
  const definition = h("textarea", { name: "definition", rows: 4, id: `${prefix}-definition`, placeholder: "max-length = 1000\noverflow = reject-publish" });
  const form = actionForm(
    `form#set-${prefix}.form-grid`,
    {
      action: (fd) => {
        const name = String(fd.get("name")).trim();
        const vhost = String(fd.get("vhost"));
        const put = () => {
          const body = {
            pattern: fd.get("pattern"),
            definition: parseArguments(fd.get("definition")),
            priority: Number(fd.get("priority") || 0),
            "apply-to": fd.get("apply-to"),
          };
          return api.put(`${path}/${enc(vhost)}/${enc(name)}`, body);
        };
        return [put, `${operator ? "Operator policy" : "Policy"} ${name} saved`];
      },
      after: refresh,
    },
    field("Virtual host", vhostSel),
    field("Name", input("name", { required: true, id: `${prefix}-name` })),
    field("Pattern", input("pattern", { required: true, id: `${prefix}-pattern`, placeholder: "^orders\\." }), "a regular expression: the names it finds take the policy"),
    field("Apply to", applySel),
    field("Priority", input("priority", { type: "number", value: "0", id: `${prefix}-priority` }), "the highest matching priority applies"),
    field("Definition", h("div", definition, keyPicker(definition, operator ? OPERATOR_KEYS : POLICY_KEYS)), "key = value, one a line"),
    h("div.form-actions", h(`button.primary#${prefix}-submit`, { type: "submit" }, operator ? "Add or update operator policy" : "Add or update policy")),
  );
  function edit(p) {
    vhostSel.value = p.vhost;
    form.elements.name.value = p.name;
    form.elements.pattern.value = p.pattern;
    applySel.value = p["apply-to"];
    form.elements.priority.value = String(p.priority);
    definition.value = definitionText(p.definition);
    form.scrollIntoView({ block: "nearest" });
  }
  async function remove(p) {
    if (!(await confirmDialog(operator ? "Delete operator policy" : "Delete policy", `Delete ${p.name} in ${p.vhost}?`, { okLabel: "Delete" }))) return;
    const ok = await act(null, () => api.del(`${path}/${enc(p.vhost)}/${enc(p.name)}`), `${p.name} deleted`);
    if (ok !== undefined) refresh();
  }
  async function refresh() {
    const [policies, vhosts] = await Promise.all([api.get(path), api.get("/vhosts?columns=name")]);
    table.set(policies);
    setOptions(vhostSel, vhosts.map((v) => v.name));
  }
  const title = operator ? "Operator policies" : "Policies";
  const note = operator
    ? "Operator policies cap what policies and queue arguments allow: where both set a limit, the smaller applies."
    : "A queue or exchange takes the matching policy of the highest priority; a queue's own arguments win where RabbitMQ lets them.";
  return {
    els: [card(title, h("p.muted", note), table.el), card(`Add or update ${operator ? "an operator policy" : "a policy"}`, form)],
    refresh,
  };
}

function policiesTab() {
  const sections = [policySection("policy"), policySection("operator")];
  return {
    el: h("div.page", ...sections.flatMap((s) => s.els)),
    refresh: () => Promise.all(sections.map((s) => s.refresh())),
  };
}

// --------------------------------------------------------------------- limits
function limitsSection(kind) {
  const vhostKind = kind === "vhost";
  const names = vhostKind ? ["max-connections", "max-queues"] : ["max-connections", "max-channels"];
  const path = vhostKind ? "/vhost-limits" : "/user-limits";
  const who = vhostKind ? "vhost" : "user";
  const prefix = `${kind}-limit`;
  const table = new Table(
    [
      { key: who, title: vhostKind ? "Virtual host" : "User" },
      ...names.map((n) => ({ title: n, num: true, sort: (row) => row.value[n] ?? -1, render: (row) => (n in row.value ? String(row.value[n]) : h("span.muted", "—")) })),
      {
        title: "",
        render: (row) => h("span", Object.keys(row.value).map((n) => h("button.small", { type: "button", onclick: () => clear(row[who], n) }, `Clear ${n}`))),
      },
    ],
    { empty: vhostKind ? "No virtual host has limits." : "No user has limits.", id: `${prefix}s-table`, rowKey: (row) => row[who] },
  );
  const ownerSel = select(who, [], { id: `${prefix}-${who}` });
  const nameSel = select("name", names, { id: `${prefix}-name` });
  const form = actionForm(
    `form#set-${prefix}.form-grid`,
    {
      action: (fd) => {
        const owner = String(fd.get(who));
        const name = String(fd.get("name"));
        const value = Number(fd.get("value"));
        return [() => api.put(`${path}/${enc(owner)}/${enc(name)}`, { value }), `${name} of ${owner} set to ${value}`];
      },
      after: refresh,
    },
    field(vhostKind ? "Virtual host" : "User", ownerSel),
    field("Limit", nameSel),
    field("Value", input("value", { type: "number", step: "1", required: true, id: `${prefix}-value` }), "a negative value is no limit"),
    h("div.form-actions", h(`button.primary#${prefix}-submit`, { type: "submit" }, "Set limit")),
  );
  async function clear(owner, name) {
    const ok = await act(null, () => api.del(`${path}/${enc(owner)}/${enc(name)}`), `${name} of ${owner} cleared`);
    if (ok !== undefined) refresh();
  }
  async function refresh() {
    const [rows, owners] = await Promise.all([api.get(path), api.get(vhostKind ? "/vhosts?columns=name" : "/users")]);
    table.set(rows);
    setOptions(ownerSel, owners.map((o) => o.name));
  }
  const title = vhostKind ? "Virtual host limits" : "User limits";
  return { els: [card(title, table.el), card(`Set a ${vhostKind ? "virtual host" : "user"} limit`, form)], refresh };
}

function limitsTab() {
  const sections = [limitsSection("vhost"), limitsSection("user")];
  return {
    el: h("div.page", ...sections.flatMap((s) => s.els)),
    refresh: () => Promise.all(sections.map((s) => s.refresh())),
  };
}
