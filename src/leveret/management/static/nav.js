// Moving between the dashboard's pages without reloading it (app.js listens).
"use strict";

export function navigate(href, replace = false) {
  if (replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  window.dispatchEvent(new Event("leveret:navigate"));
}
