// The router: #/runs, #/rollouts?filters, #/rollout/ID, #/prompts, #/canaries. No token, or a refused one, shows the
// login screen and nothing else.
"use strict";

const loginScreen = document.getElementById("login-screen");
const view = document.getElementById("view");
const header = document.getElementById("top");

function showLogin(message) {
  stopCurves();
  header.hidden = true;
  view.hidden = true;
  view.replaceChildren();
  loginScreen.hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("token").focus();
}

async function route() {
  stopCurves();
  if (!api.token()) return showLogin("");
  const [path, search] = (location.hash.slice(1) || "/runs").split("?");
  const params = new URLSearchParams(search || "");
  const parts = path.split("/").filter(Boolean);
  const name = parts[0] || "runs";
  try {
    const who = await api.get("/whoami");
    document.getElementById("role").textContent = who.role;
    loginScreen.hidden = true;
    header.hidden = false;
    view.hidden = false;
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", link.dataset.page === name || (name === "rollout" && link.dataset.page === "rollouts"));
    }
    const page = pages[name] || pages.runs;
    await page(view, params, decodeURIComponent(parts.slice(1).join("/")));
  } catch (error) {
    if (error instanceof Unauthorized) {
      api.clearToken();
      return showLogin("That token was refused: use the admin token or the viewer token.");
    }
    view.replaceChildren(el("p", { class: "error" }, `Could not load this page: ${error.message}`));
  }
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  api.setToken(document.getElementById("token").value.trim());
  document.getElementById("token").value = "";
  route();
});

document.getElementById("logout").addEventListener("click", () => {
  api.clearToken();
  showLogin("");
});

window.addEventListener("hashchange", route);
route();
