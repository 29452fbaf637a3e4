// Leveret's dashboard: one page, routed on the path; every figure and action goes through
// the management API (the one `leveret ctl` uses). ES modules, no libraries, no build
// step, nothing fetched from the internet.
"use strict";

import * as api from "./api.js";
import { $, $$, toast } from "./ui.js";
import { navigate } from "./nav.js";
import { overviewPage } from "./page-overview.js";
import { logsPage } from "./page-logs.js";
import { connectionsPage, channelsPage } from "./page-connections.js";
import { exchangesPage, exchangePage } from "./page-exchanges.js";
import { queuesPage, queuePage } from "./page-queues.js";
import { adminPage } from "./page-admin.js";
import { reportPage } from "./page-report.js";

const params = new URLSearchParams(location.search);
export const REFRESH_MS = Number(params.get("refresh")) || 2000;

const ROUTES = [
  [/^\/$/, "overview", () => overviewPage()],
  [/^\/logs$/, "logs", () => logsPage()],
  [/^\/connections$/, "connections", () => connectionsPage()],
  [/^\/channels$/, "channels", () => channelsPage()],
  [/^\/exchanges$/, "exchanges", () => exchangesPage()],
  [/^\/exchanges\/([^/]+)\/([^/]+)$/, "exchanges", (v, n) => exchangePage(v, n)],
  [/^\/queues$/, "queues", () => queuesPage()],
  [/^\/queues\/([^/]+)\/([^/]+)$/, "queues", (v, n) => queuePage(v, n)],
  [/^\/admin(?:\/([a-z-]+))?$/, "admin", (tab) => adminPage(tab, whoami)],
  [/^\/report$/, "report", () => reportPage()],
];

let whoami = null;
let current = null; // {page, timer, nav}
let generation = 0;

// ------------------------------------------------------------------- routing
function match(path) {
  for (const [re, nav, make] of ROUTES) {
    const m = re.exec(path);
    if (m) return { nav, make: () => make(...m.slice(1).map((s) => (s === undefined ? s : decodeURIComponent(s)))) };
  }
  return null;
}


function route() {
  const gen = ++generation;
  if (current) {
    clearTimeout(current.timer);
    if (current.page.destroy) current.page.destroy();
    current = null;
  }
  const found = match(location.pathname);
  const main = $("#main");
  if (!found) {
    main.replaceChildren(notFound());
    setTitle("Not found", []);
    return;
  }
  const page = found.make();
  current = { page, timer: null, nav: found.nav };
  for (const a of $$("#nav a")) a.classList.toggle("active", a.dataset.page === found.nav);
  setTitle(page.title, page.crumbs || []);
  main.replaceChildren(page.el);
  main.scrollTop = 0;
  const tick = async () => {
    if (gen !== generation) return;
    try {
      if (page.refresh) await page.refresh();
      if (gen !== generation) return;
      $("#status").textContent = `updated ${new Date().toLocaleTimeString()}`;
      $("#status").classList.remove("error");
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
    } catch (err) {
      if (gen !== generation) return;
      if (err.status === 404 && page.gone) {
        page.gone();
        return;
      }
      $("#status").textContent = `error: ${err.message}`;
      $("#status").classList.add("error");
    }
    if (gen === generation && page.refresh && page.interval !== 0) {
      current.timer = setTimeout(tick, page.interval || REFRESH_MS);
    }
  };
  tick();
}

function notFound() {
  const el = document.createElement("section");
  el.className = "card";
  el.textContent = "There is no such page.";
  return el;
}

function setTitle(title, crumbs) {
  $("#page-title").textContent = title;
  document.title = `${title} · Leveret`;
  const box = $("#crumbs");
  box.replaceChildren();
  crumbs.forEach(([href, text], i) => {
    const a = document.createElement(href ? "a" : "span");
    if (href) {
      a.href = href;
      a.dataset.nav = "";
    }
    a.textContent = text;
    box.append(...(i ? [" › ", a] : [a]));
  });
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  e.preventDefault();
  const href = a.getAttribute("href");
  if (href !== location.pathname + location.search) navigate(href);
});
window.addEventListener("popstate", route);
window.addEventListener("leveret:navigate", route);

// ------------------------------------------------------------------ keyboard
const GO = { o: "/", l: "/logs", c: "/connections", h: "/channels", e: "/exchanges", q: "/queues", a: "/admin", r: "/report" };
let pendingG = 0;

function typing(target) {
  return target.closest("input, textarea, select, [contenteditable]") !== null;
}

document.addEventListener("keydown", (e) => {
  if ($("#app").hidden || e.ctrlKey || e.metaKey || e.altKey) return;
  if (document.querySelector("dialog[open]")) return;
  if (e.key === "Escape" && typing(e.target)) {
    e.target.blur();
    return;
  }
  if (typing(e.target)) return;
  if (pendingG && Date.now() - pendingG < 1500 && GO[e.key]) {
    pendingG = 0;
    e.preventDefault();
    navigate(GO[e.key]);
    return;
  }
  pendingG = 0;
  if (e.key === "g") {
    pendingG = Date.now();
    return;
  }
  if (e.key === "?") {
    e.preventDefault();
    $("#help").showModal();
    return;
  }
  if (e.key === "/") {
    const box = $("#main [data-search]");
    if (box) {
      e.preventDefault();
      box.focus();
      box.select();
    }
    return;
  }
  if (current && current.page.keys) current.page.keys(e);
});

$("#help-open").addEventListener("click", () => $("#help").showModal());
$("#help-close").addEventListener("click", () => $("#help").close());

// ------------------------------------------------------------------ login
function showLogin(message) {
  generation++;
  if (current) {
    clearTimeout(current.timer);
    if (current.page.destroy) current.page.destroy();
    current = null;
  }
  $("#app").hidden = true;
  $("#login-screen").hidden = false;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#username").focus();
}

async function start() {
  try {
    whoami = await api.get("/whoami");
  } catch (err) {
    showLogin(err.status === 401 ? (api.loggedIn() ? err.reason || "Login failed" : "") : err.message);
    return;
  }
  const overview = await api.get("/overview").catch(() => null);
  $("#whoami").textContent = `${whoami.name} · ${(whoami.tags || []).join(", ") || "no tags"}`;
  $("#nav-admin").hidden = !(whoami.tags || []).includes("administrator");
  if (overview) {
    $("#node").textContent = `${overview.node} · RabbitMQ ${overview.rabbitmq_version} compatible`;
  }
  $("#login-screen").hidden = true;
  $("#login").hidden = true;
  $("#app").hidden = false;
  route();
}

api.onUnauthorised((err) => showLogin(err.reason === "Login failed" ? "Login failed" : err.reason));

$("#login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  api.setCredentials($("#username").value, $("#password").value);
  start();
});

$("#logout").addEventListener("click", () => {
  api.forget();
  showLogin("");
});

window.addEventListener("unhandledrejection", (e) => {
  if (e.reason && e.reason.status === 401) return;
  toast(String((e.reason && e.reason.message) || e.reason), "error");
});

if (api.loggedIn()) start();
else showLogin("");
