// The management API, as `leveret ctl` uses it: HTTP basic auth, RabbitMQ's paths and
// JSON, errors as {"error", "reason"}.
"use strict";

const AUTH_KEY = "leveret-auth";
let token = sessionStorage.getItem(AUTH_KEY);
const listeners = new Set();

export class ApiError extends Error {
  constructor(status, error, reason) {
    super(reason ? String(reason) : `HTTP ${status}`);
    this.status = status;
    this.error = error;
    this.reason = reason;
  }
}

export function loggedIn() {
  return Boolean(token);
}

export function setCredentials(user, password) {
  token = btoa(unescape(encodeURIComponent(`${user}:${password}`)));
  sessionStorage.setItem(AUTH_KEY, token);
}

export function authHeader() {
  return token ? { Authorization: "Basic " + token } : {};
}

export function forget() {
  token = null;
  sessionStorage.removeItem(AUTH_KEY);
}

/** Called with the error when any request answers 401 (the app shows the login form). */
export function onUnauthorised(fn) {
  listeners.add(fn);
}

/** A path segment: vhosts and names are percent-encoded, "/" included. */
export const enc = (s) => encodeURIComponent(s);

export async function request(method, path, body, headers = {}) {
  // X-Requested-With: a 401 then brings no WWW-Authenticate challenge, so the browser
  // shows no login prompt of its own over the dashboard's
  const init = { method, headers: { Accept: "application/json", "X-Requested-With": "XMLHttpRequest", ...authHeader(), ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch("/api" + path, init);
  const text = await resp.text();
  let data = null;
  if (text.trim()) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!resp.ok) {
    const err = new ApiError(
      resp.status,
      data && data.error,
      (data && data.reason) || (typeof data === "string" ? data : resp.statusText),
    );
    const reason = data && data.reason;
    const refused = ["Login failed", "Not management user", "User can only log in via localhost"];
    if (resp.status === 401 && refused.includes(reason)) {
      for (const fn of listeners) fn(err);
    }
    throw err;
  }
  return data;
}

export const get = (path) => request("GET", path);
export const put = (path, body) => request("PUT", path, body === undefined ? {} : body);
export const post = (path, body) => request("POST", path, body === undefined ? {} : body);
export const del = (path, headers) => request("DELETE", path, undefined, headers);
