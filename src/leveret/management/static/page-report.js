// The last log report (`leveret pipeline report`), served by the dashboard: its page is
// fetched with the login and shown in a sandboxed frame, its charts inlined.
"use strict";

import * as api from "./api.js";
import { card, fmtTime, h } from "./ui.js";

async function asDataUrl(path) {
  const resp = await fetch(path, { headers: { "X-Requested-With": "XMLHttpRequest", ...api.authHeader() } });
  if (!resp.ok) return "";
  const blob = await resp.blob();
  return new Promise((resolve) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.readAsDataURL(blob);
  });
}

export function reportPage() {
  const head = h("div#report-head");
  const frame = h("iframe#report-frame.report-frame", { sandbox: "", title: "Log report" });
  const el = h("div.page", card(null, head, frame));
  let shown = null;

  async function refresh() {
    const info = await api.get("/logs/report");
    if (!info.available) {
      head.replaceChildren(
        h("h2", "No report yet"),
        h("p.muted", "The dashboard serves the last report found in ", h("code", info.path), ". Make one with:"),
        h("pre.block", `leveret pipeline report --lake <lake> --out ${info.path}`),
      );
      frame.hidden = true;
      return;
    }
    if (shown === info.modified) return;
    shown = info.modified;
    head.replaceChildren(h("h2", "Leveret log report"), h("p.muted", `Made ${fmtTime(info.modified)} · ${info.path}/${info.document}`));
    const resp = await fetch(`/api/logs/report/${info.document}`, { headers: { "X-Requested-With": "XMLHttpRequest", ...api.authHeader() } });
    const text = await resp.text();
    if (info.document.endsWith(".md")) {
      frame.srcdoc = `<pre style="white-space:pre-wrap;font:13px ui-monospace,monospace">${text.replace(/[&<]/g, (c) => (c === "&" ? "&amp;" : "&lt;"))}</pre>`;
    } else {
      const doc = new DOMParser().parseFromString(text, "text/html");
      for (const img of doc.querySelectorAll("img[src]")) {
        const src = img.getAttribute("src");
        if (/^[\w./-]+$/.test(src) && !src.includes("..")) img.setAttribute("src", await asDataUrl(`/api/logs/report/${src}`));
      }
      frame.srcdoc = "<!doctype html>" + doc.documentElement.outerHTML;
    }
    frame.hidden = false;
  }

  return { title: "Log report", el, refresh, interval: 10000 };
}
