// The console works without this script: every page is whole HTML and every
// action a plain form. The script adds the live parts: relative times that
// stay current, actions answered in place, the overview's refresh and the
// live tail's stream.
"use strict";

// ago words the time from now to iso as the server's ago does.
function ago(iso) {
  let d = (Date.now() - Date.parse(iso)) / 1000;
  const past = d >= 0;
  d = Math.abs(d);
  if (d < 10) return "just now";
  let s;
  if (d < 60) s = Math.floor(d) + " s";
  else if (d < 3600) s = Math.floor(d / 60) + " min";
  else if (d < 48 * 3600) s = Math.floor(d / 3600) + " h";
  else s = Math.floor(d / 86400) + " days";
  return past ? s + " ago" : "in " + s;
}

function refreshAgo(root) {
  for (const el of root.querySelectorAll("[data-ago]")) el.textContent = ago(el.dataset.ago);
}

function utc(iso) {
  return iso.replace("T", " ").replace(/(\.\d+)?Z$/, " UTC");
}

// swapMain puts the main element of a whole page's HTML in place of this
// page's, and moves focus to what the answer says.
function swapMain(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  const next = doc.querySelector("main");
  if (!next) return false;
  const main = document.querySelector("main");
  main.replaceChildren(...next.childNodes);
  document.title = doc.title;
  const target = main.querySelector(".notice, [autofocus]") || main;
  target.focus();
  return true;
}

// plainSubmit posts form as the browser would without this script,
// with the button that submitted it.
function plainSubmit(form, submitter) {
  if (submitter && submitter.name) {
    const field = document.createElement("input");
    field.type = "hidden";
    field.name = submitter.name;
    field.value = submitter.value;
    form.append(field);
  }
  form.submit();
}

// Forms marked data-inplace post in the background and show the answer in
// place; the server answers them with the same page a plain post gets.
document.addEventListener("submit", async (ev) => {
  const form = ev.target;
  if (!form.matches("form[data-inplace]")) return;
  ev.preventDefault();
  const submitter = ev.submitter;
  const body = new URLSearchParams(new FormData(form, submitter));
  for (const b of form.querySelectorAll("button")) b.disabled = true;
  try {
    // The attribute, not form.action, which a field named "action" would
    // stand for.
    const resp = await fetch(form.getAttribute("action"), { method: "POST", body, credentials: "same-origin" });
    if (!swapMain(await resp.text())) plainSubmit(form, submitter);
  } catch (e) {
    plainSubmit(form, submitter);
  }
});

// The overview fetches itself again while it is visible, unless focus is
// inside what would be replaced.
// An action answered in place puts a new region in place of the old, so
// each round looks it up again.
function startRefresh(id) {
  const every = Number(document.getElementById(id).dataset.refresh) * 1000;
  setInterval(async () => {
    const region = document.getElementById(id);
    const stamp = document.getElementById("refreshed");
    if (!region || document.hidden || region.contains(document.activeElement)) return;
    try {
      const resp = await fetch(location.href, { credentials: "same-origin" });
      if (!resp.ok) return;
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const fresh = doc.getElementById(region.id);
      if (!fresh) {
        // The session ended: the answer is the login page.
        if (stamp) stamp.textContent = "Not refreshed: the session has ended. Reload the page to log in again.";
        return;
      }
      region.replaceChildren(...fresh.childNodes);
      if (stamp) stamp.textContent = "Last 15 minutes, a bar a minute · updated " + utc(new Date().toISOString());
    } catch (e) {
      // The next round tries again.
    }
  }, every);
}

// cell adds a cell to row, labelled with its column's heading for the
// stacked rows of a narrow screen, as the server's rows are.
function cell(row, label, text) {
  const td = row.insertCell();
  td.dataset.label = label;
  if (text) td.textContent = text;
  return td;
}

// tailRow builds a live tail row with text nodes only.
function tailRow(e) {
  const tr = document.createElement("tr");
  tr.className = "fresh";
  const when = cell(tr, "Time");
  const time = document.createElement("time");
  time.dateTime = e.at;
  time.textContent = utc(e.at);
  const rel = document.createElement("span");
  rel.className = "ago";
  rel.dataset.ago = e.at;
  rel.textContent = ago(e.at);
  when.append(time, " ", rel);
  cell(tr, "Source", e.source);
  const badge = document.createElement("span");
  badge.className = "badge " + e.decision;
  badge.textContent = e.decision;
  cell(tr, "Decision").append(badge);
  const id = cell(tr, "Request ID");
  if (e.receipt) {
    const a = document.createElement("a");
    a.href = "/ui/receipt?" + new URLSearchParams({ source: e.source, request_id: e.request_id });
    a.textContent = e.request_id;
    id.append(a);
  } else if (e.request_id) {
    id.textContent = e.request_id;
  }
  cell(tr, "Delivery ID", e.delivery_id);
  cell(tr, "Resource", e.resource);
  cell(tr, "Version", e.version);
  let detail = "";
  if (e.reason) detail = e.reason + ": " + (e.message || "");
  else if (e.decision === "stale" && e.latest_version) detail = "latest is " + e.latest_version;
  cell(tr, "Detail", detail);
  return tr;
}

const maxTailRows = 200;

function startTail(table) {
  const body = table.tBodies[0];
  const state = document.getElementById("stream-state");
  const pause = document.getElementById("pause");
  let source = null;
  let last = new URL(table.dataset.stream, location.href).searchParams.get("after") || "0";
  let seen = 0;

  function open() {
    const url = new URL(table.dataset.stream, location.href);
    url.searchParams.set("after", last);
    source = new EventSource(url);
    source.onopen = () => { state.textContent = "Live: new answers appear at the top"; };
    source.onerror = () => { state.textContent = "Reconnecting…"; };
    source.addEventListener("answer", (msg) => {
      const e = JSON.parse(msg.data);
      last = msg.lastEventId || last;
      const none = body.querySelector("tr.none");
      if (none) none.remove();
      body.prepend(tailRow(e));
      while (body.rows.length > maxTailRows) body.deleteRow(-1);
      seen++;
      state.textContent = "Live: " + seen + " new since the page opened";
    });
  }
  pause.addEventListener("click", () => {
    const paused = pause.getAttribute("aria-pressed") === "true";
    pause.setAttribute("aria-pressed", String(!paused));
    pause.textContent = paused ? "Pause" : "Resume";
    if (paused) {
      open();
    } else {
      source.close();
      state.textContent = "Paused: resuming shows what arrived meanwhile";
    }
  });
  open();
}

document.addEventListener("DOMContentLoaded", () => {
  refreshAgo(document);
  setInterval(() => refreshAgo(document), 15000);
  const region = document.querySelector("[data-refresh]");
  if (region) startRefresh(region.id);
  const tail = document.querySelector("table[data-stream]");
  if (tail) startTail(tail);
});
