// Admin: users, virtual hosts and permissions. Each tab is one entry of ADMIN_TABS (id,
// title, make); more (policies, limits) are added the same way.
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";
import { Table, act, card, confirmDialog, field, fmtInt, h, input, link, select, setOptions } from "./ui.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];

export const ADMIN_TABS = [
  { id: "users", title: "Users", make: usersTab },
  { id: "vhosts", title: "Virtual hosts", make: vhostsTab },
  { id: "permissions", title: "Permissions", make: permissionsTab },
];

export function adminPage(tabId, whoami) {
  const tab = ADMIN_TABS.find((t) => t.id === tabId) || ADMIN_TABS[0];
  const tabs = h(
    "nav.tabs",
    { "aria-label": "Admin" },
    ADMIN_TABS.map((t) => link(`/admin/${t.id}`, t.title, { class: t === tab ? "tab active" : "tab", "aria-current": t === tab ? "page" : null })),
  );
  if (whoami && !(whoami.tags || []).includes("administrator")) {
    return { title: "Admin", el: h("div.page", card(null, h("p", "Only administrators manage users, virtual hosts and permissions."))) };
  }
  const body = tab.make();
  return { title: `Admin · ${tab.title}`, crumbs: [["/admin", "Admin"]], el: h("div.page", tabs, body.el), refresh: body.refresh };
}

function tagPicker(inputEl) {
  return h(
    "div.tag-picker",
    TAGS.map((t) =>
      h("button.chip.small", {
        type: "button",
        onclick: () => {
          const tags = inputEl.value.split(",").map((s) => s.trim()).filter(Boolean);
          inputEl.value = (tags.includes(t) ? tags.filter((x) => x !== t) : [...tags, t]).join(", ");
        },
      }, t),
    ),
  );
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
  const form = h(
    "form#add-user.form-grid",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const fd = new FormData(form);
        const name = String(fd.get("username")).trim();
        const body = { tags: String(fd.get("tags")) };
        if (fd.get("password")) body.password = fd.get("password");
        const ok = await act(form, () => api.put(`/users/${enc(name)}`, body), `User ${name} saved`);
        if (ok !== undefined) {
          form.reset();
          refresh();
        }
      },
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
  const table = new Table(
    [
      { key: "name", title: "Name" },
      { key: "description", title: "Description" },
      { title: "Tags", render: (v) => h("span", (v.tags || []).map((t) => h("span.badge", t))) },
      { key: "messages_ready", title: "Ready", num: true, render: (v) => fmtInt(v.messages_ready || 0) },
      { key: "messages_unacknowledged", title: "Unacked", num: true, render: (v) => fmtInt(v.messages_unacknowledged || 0) },
      { key: "messages", title: "Total", num: true, render: (v) => fmtInt(v.messages || 0) },
      { title: "", render: (v) => h("button.small", { type: "button", onclick: () => removeVhost(v) }, "Delete") },
    ],
    { empty: "No virtual hosts.", id: "vhosts-table", rowKey: (v) => v.name },
  );
  const form = h(
    "form#add-vhost.form-grid",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const fd = new FormData(form);
        const name = String(fd.get("name")).trim();
        const ok = await act(form, () => api.put(`/vhosts/${enc(name)}`, { description: fd.get("description"), tags: fd.get("tags") }), `Virtual host ${name} saved`);
        if (ok !== undefined) {
          form.reset();
          refresh();
        }
      },
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
  const table = new Table(
    [
      { key: "user", title: "User" },
      { key: "vhost", title: "Virtual host" },
      { key: "configure", title: "Configure" },
      { key: "write", title: "Write" },
      { key: "read", title: "Read" },
      { title: "", render: (p) => h("button.small", { type: "button", onclick: () => clear(p) }, "Clear") },
    ],
    { empty: "No permissions.", id: "permissions-table", rowKey: (p) => `${p.user}\u0000${p.vhost}` },
  );
  const userSel = select("user", [], { id: "perm-user" });
  const vhostSel = select("vhost", [], { id: "perm-vhost" });
  const form = h(
    "form#set-permission.form-grid",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const fd = new FormData(form);
        const body = { configure: fd.get("configure"), write: fd.get("write"), read: fd.get("read") };
        const ok = await act(form, () => api.put(`/permissions/${enc(fd.get("vhost"))}/${enc(fd.get("user"))}`, body), "Permission set");
        if (ok !== undefined) refresh();
      },
    },
    field("User", userSel),
    field("Virtual host", vhostSel),
    field("Configure regexp", input("configure", { value: ".*" })),
    field("Write regexp", input("write", { value: ".*" })),
    field("Read regexp", input("read", { value: ".*" })),
    h("div.form-actions", h("button.primary#perm-submit", { type: "submit" }, "Set permission")),
  );
  async function clear(p) {
    if (!(await confirmDialog("Clear permission", `Remove ${p.user}'s permissions in ${p.vhost}?`, { okLabel: "Clear" }))) return;
    const ok = await act(null, () => api.del(`/permissions/${enc(p.vhost)}/${enc(p.user)}`), "Permission cleared");
    if (ok !== undefined) refresh();
  }
  async function refresh() {
    const [perms, users, vhosts] = await Promise.all([api.get("/permissions"), api.get("/users"), api.get("/vhosts?columns=name")]);
    table.set(perms);
    setOptions(userSel, users.map((u) => u.name));
    setOptions(vhostSel, vhosts.map((v) => v.name));
  }
  return { el: h("div.page", card("Permissions", table.el), card("Set a permission", form)), refresh };
}
