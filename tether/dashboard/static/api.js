// The dashboard's JSON API client and small DOM helpers. The token lives in sessionStorage and goes out
// as a bearer header; a 401 sends the user back to the login screen.
"use strict";

const TOKEN_KEY = "tether.token";

class Unauthorized extends Error {}

const api = {
  token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  setToken(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  clearToken() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
  async get(path, params) {
    const url = new URL("/ui/api" + path, location.origin);
    for (const [key, value] of Object.entries(params || {})) {
      if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, value);
    }
    const response = await fetch(url, { headers: { Authorization: "Bearer " + (api.token() || "") } });
    if (response.status === 401) throw new Unauthorized("the token was refused");
    const body = await response.json();
    if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
    return body;
  },
};

// el("tr", {class: "x", dataset: {id: 1}}, child, "text", ...)
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  return String(value);
}

function when(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toLocaleString();
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}
