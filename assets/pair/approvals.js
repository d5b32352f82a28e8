// meshtray phone page, approvals: for a phone whose grant holds the
// `approve` scope, the requests waiting on the computer, live, with their
// countdown and Approve / Deny.
//
// It runs beside pair.js and shares nothing with it but the page and the
// stored grant: while the remote view (#view-remote) is shown, it reads
// the grant pair.js keeps in localStorage ("meshtray.grant.<device ID>",
// the device ID from GET /pair/issuer), asks GET /pair/whoami whether the
// grant holds `approve`, and only then shows #approvals-card and follows
// GET /remote/approvals/events (server-sent events read with fetch, since
// EventSource cannot send `Authorization`): one `approvals` event, a
// RemoteApprovals snapshot {device, device_id, now, approvals: [...]}, at
// once and after every change. A decision is POST /remote/approvals/{id}
// {decision: "approve"|"deny", always}. The countdown runs on the
// computer's clock: each snapshot carries its `now`.
//
// Everything the computer sends is shown with textContent, never parsed as
// HTML; the computer has already made invisible characters visible.
"use strict";

(() => {
  const STORE_PREFIX = "meshtray.grant."; // pair.js's
  const FEED = "/remote/approvals/events";
  const LIST = "/remote/approvals";
  const MAX_EVENT = 2 << 20; // bytes of one unfinished SSE event
  const POLL_MS = 5000; // without streaming fetch

  const $ = (id) => document.getElementById(id);

  const st = {
    token: "",
    ctrl: null, // AbortController of the running feed
    offset: 0, // computer clock minus this phone's, in ms
    items: new Map(), // id -> {a, el, decided}
    device: "",
    ticker: 0,
  };

  // ---------------------------------------------------------------- network

  async function call(method, path, { body, signal, accept } = {}) {
    const headers = { Authorization: "Bearer " + st.token };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (accept) headers.Accept = accept;
    return fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
      referrerPolicy: "no-referrer",
    });
  }

  async function errorText(resp) {
    try {
      const j = await resp.json();
      if (j && typeof j.error === "string") return j.error;
    } catch {
      // not JSON
    }
    return resp.status + " " + resp.statusText;
  }

  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => {
        clearTimeout(t);
        reject(new DOMException("aborted", "AbortError"));
      }, { once: true });
    });
  }

  // grantToken finds the token pair.js stored for the computer that
  // serves this page.
  async function grantToken(signal) {
    const resp = await fetch("/pair/issuer", { cache: "no-store", credentials: "omit", redirect: "error", signal });
    if (!resp.ok) return "";
    const iss = await resp.json();
    if (!iss || typeof iss.id !== "string") return "";
    try {
      const rec = JSON.parse(localStorage.getItem(STORE_PREFIX + iss.id) || "null");
      return rec && typeof rec.token === "string" ? rec.token : "";
    } catch {
      return "";
    }
  }

  // ------------------------------------------------------------------- feed

  async function start() {
    stop();
    const ctrl = new AbortController();
    st.ctrl = ctrl;
    try {
      for (;;) {
        st.token = await grantToken(ctrl.signal);
        if (!st.token) return hide();
        const who = await call("GET", "/pair/whoami", { signal: ctrl.signal });
        if (who.ok) {
          const w = await who.json();
          if (!w || !Array.isArray(w.scopes) || !w.scopes.includes("approve")) return hide();
          $("approvals-card").hidden = false;
          status("Connecting…");
          if (!st.ticker) st.ticker = setInterval(tick, 1000);
          if ((await follow(ctrl.signal)) !== "refused") return;
        } else if (who.status !== 401) {
          return hide();
        }
        // Paused (or revoked: pair.js says which): look again later.
        hide();
        await sleep(30000, ctrl.signal);
      }
    } catch (e) {
      if (e.name !== "AbortError") status("Stopped: " + String(e.message || e), "bad");
    }
  }

  function stop() {
    if (st.ctrl) st.ctrl.abort();
    st.ctrl = null;
  }

  function hide() {
    $("approvals-card").hidden = true;
    if (st.ticker) clearInterval(st.ticker);
    st.ticker = 0;
    st.items.clear();
    $("approvals-list").textContent = "";
  }

  // follow keeps the feed open, reconnecting with a growing pause; a
  // browser without streaming fetch polls the list instead.
  async function follow(signal) {
    const streaming = typeof ReadableStream !== "undefined" && typeof TextDecoder !== "undefined";
    let failures = 0;
    for (;;) {
      let resp;
      try {
        resp = streaming
          ? await call("GET", FEED, { signal, accept: "text/event-stream" })
          : await call("GET", LIST, { signal });
      } catch (e) {
        if (e.name === "AbortError") throw e;
        failures++;
        status("Lost contact with " + (st.device || "the computer") + ". Retrying…", "bad");
        await sleep(Math.min(1000 * 2 ** failures, 15000), signal);
        continue;
      }
      if (resp.status === 401) return "refused"; // paused or revoked
      if (resp.status === 403) return hide(); // no approve scope
      if (!resp.ok) {
        const wait = parseInt(resp.headers.get("Retry-After") || "", 10);
        status("The computer answered " + (await errorText(resp)) + ". Retrying…", "bad");
        await sleep((Number.isFinite(wait) && wait > 0 ? Math.min(wait, 60) : 5) * 1000, signal);
        continue;
      }
      failures = 0;
      if (!streaming) {
        render(await resp.json());
        await sleep(POLL_MS, signal);
        continue;
      }
      await readEvents(resp.body, signal);
      // The computer ends a feed now and then (or restarted): reconnect.
      await sleep(500, signal);
    }
  }

  // readEvents reads server-sent events (HTML Living Standard §9.2) until
  // the stream ends, rendering each `approvals` event.
  async function readEvents(body, signal) {
    const reader = body.getReader();
    signal.addEventListener("abort", () => reader.cancel().catch(() => {}), { once: true });
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (signal.aborted) throw new DOMException("aborted", "AbortError");
        return; // cut: reconnect
      }
      if (chunk.done) return;
      buf += dec.decode(chunk.value, { stream: true }).replace(/\r\n?/g, "\n");
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (event !== "approvals" || !data.length) continue; // keep-alive
        let snap;
        try {
          snap = JSON.parse(data.join("\n"));
        } catch {
          continue;
        }
        render(snap);
      }
      if (buf.length > MAX_EVENT) {
        reader.cancel().catch(() => {});
        return;
      }
    }
  }

  // ----------------------------------------------------------------- render

  function status(text, tone = "") {
    const el = $("approvals-status");
    el.textContent = text;
    el.className = "approvals-status" + (tone ? " " + tone : "");
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function titleOf(a) {
    const who = a.peer || "a device";
    switch (a.kind) {
      case "delegation":
        return "Delegation from " + who;
      case "capability":
        return a.grant_id ? "Capability call from " + who : "A capability call on the computer";
      case "pairing":
        return who + " wants to pair";
      case "files":
        return "Files from " + who;
    }
    return "Request from " + who;
  }

  function viaOf(a) {
    const parts = [];
    if (a.via === "tailnet") parts.push("over the tailnet");
    else if (a.via === "lan") parts.push("over the local network");
    else if (a.via === "loopback") parts.push("from the computer itself");
    if (a.addr) parts.push(a.addr);
    if (a.tailnet_user || a.tailnet_node) parts.push("(" + [a.tailnet_user, a.tailnet_node].filter(Boolean).join(" on ") + ")");
    return parts.join(" ");
  }

  function render(snap) {
    if (!snap || !Array.isArray(snap.approvals)) return;
    const now = Date.parse(snap.now);
    if (Number.isFinite(now)) st.offset = now - Date.now();
    st.device = typeof snap.device === "string" ? snap.device : st.device;
    const seen = new Set();
    const list = $("approvals-list");
    for (const a of snap.approvals) {
      if (!a || typeof a.id !== "string") continue;
      seen.add(a.id);
      if (!st.items.has(a.id)) {
        const item = { a, el: null, decided: "" };
        item.el = build(item);
        st.items.set(a.id, item);
        list.appendChild(item.el);
      }
    }
    for (const [id, item] of st.items) {
      if (!seen.has(id)) {
        item.el.remove();
        st.items.delete(id);
      }
    }
    const n = st.items.size;
    status(n === 0 ? "Nothing is waiting." : n === 1 ? "1 request is waiting." : n + " requests are waiting.");
    tick();
  }

  // build makes the element of one request; it does not change afterwards
  // but for its countdown and its decision state.
  function build(item) {
    const a = item.a;
    const li = el("li", "approval" + (a.own ? " own" : ""));
    li.dataset.id = a.id;
    li.dataset.kind = a.kind;
    const head = el("div", "approval-head");
    head.append(el("h3", "approval-title", titleOf(a)));
    if (a.own) head.append(el("span", "badge warn", "Your request"));
    li.append(head);
    const from = [a.peer || "unknown"];
    if (a.device_id) from.push("device " + a.device_id.slice(0, 7));
    if (a.os) from.push(a.os);
    li.append(el("p", "approval-from", from.join(" · ")));
    const via = viaOf(a);
    if (via) li.append(el("p", "approval-via muted small", via));
    li.append(el("p", "approval-summary", a.summary || ""));
    const detail = (a.detail || "").trim();
    if (detail && detail !== (a.summary || "").trim()) li.append(el("pre", "approval-detail", detail));
    if (a.kind === "pairing" && Array.isArray(a.scopes) && a.scopes.length) {
      li.append(el("p", "approval-scopes small", "Asks for: " + a.scopes.join(", ")));
    }
    if (a.note) li.append(el("p", "approval-note small", a.note));
    const left = el("p", "approval-left small");
    left.setAttribute("aria-live", "off");
    li.append(left);
    item.left = left;
    let always = null;
    if (a.can_always) {
      const lab = el("label", "check small");
      always = el("input");
      always.type = "checkbox";
      always.className = "approval-always";
      const what = a.kind === "files" ? " Always allow files from " : " Always allow from ";
      lab.append(always, document.createTextNode(what + (a.peer || "this device")));
      li.append(lab);
    }
    const buttons = el("div", "approval-buttons");
    const deny = el("button", "secondary approval-deny", "Deny");
    deny.type = "button";
    const approve = el("button", "primary approval-approve", "Approve");
    approve.type = "button";
    if (a.can_deny) buttons.append(deny);
    if (a.can_approve) buttons.append(approve);
    if (buttons.children.length) li.append(buttons);
    const result = el("p", "approval-result small");
    result.setAttribute("role", "status");
    li.append(result);
    item.result = result;
    item.buttons = [deny, approve];
    deny.addEventListener("click", () => decide(item, "deny", false));
    approve.addEventListener("click", () => decide(item, "approve", !!(always && always.checked)));
    return li;
  }

  function countdown(ms) {
    if (ms <= 0) return "Expired";
    const s = Math.ceil(ms / 1000);
    const m = Math.floor(s / 60);
    return (m > 0 ? m + " min " + String(s % 60).padStart(2, "0") + " s" : s + " s") + " left";
  }

  function tick() {
    const now = Date.now() + st.offset;
    for (const item of st.items.values()) {
      const ms = Date.parse(item.a.expires) - now;
      item.left.textContent = Number.isFinite(ms) ? countdown(ms) : "";
      item.left.dataset.ms = Number.isFinite(ms) ? String(Math.max(0, Math.round(ms))) : "";
      item.left.classList.toggle("soon", ms < 30000);
      if (ms <= 0 && !item.decided) for (const b of item.buttons) b.disabled = true;
    }
  }

  async function decide(item, decision, always) {
    if (item.decided) return;
    for (const b of item.buttons) b.disabled = true;
    item.result.className = "approval-result small";
    item.result.textContent = decision === "approve" ? "Approving…" : "Denying…";
    let resp;
    try {
      resp = await call("POST", "/remote/approvals/" + encodeURIComponent(item.a.id), { body: always ? { decision, always } : { decision } });
    } catch (e) {
      item.result.className = "approval-result small bad";
      item.result.textContent = "Not sent: lost contact with the computer. Try again.";
      for (const b of item.buttons) b.disabled = false;
      return;
    }
    if (resp.status === 204) {
      item.decided = decision;
      item.el.classList.add("decided");
      item.result.className = "approval-result small ok";
      item.result.textContent = decision === "approve" ? "✓ Approved from this phone" : "✓ Denied from this phone";
      return;
    }
    const why = await errorText(resp);
    item.result.className = "approval-result small bad";
    item.result.textContent = (resp.status === 404 ? "Already decided or expired: " : "Refused: ") + why;
    if (resp.status !== 404) for (const b of item.buttons) b.disabled = false;
  }

  // ------------------------------------------------------------------ wiring

  // The remote view's visibility starts and stops the feed: pair.js shows
  // it once the phone is paired, hides it when the pairing ends.
  function init() {
    const view = $("view-remote");
    if (!view) return;
    let shown = false;
    const sync = () => {
      const now = !view.hidden;
      if (now === shown) return;
      shown = now;
      if (now) start();
      else {
        stop();
        hide();
      }
    };
    new MutationObserver(sync).observe(view, { attributes: true, attributeFilter: ["hidden"] });
    sync();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
