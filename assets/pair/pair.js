// meshtray phone page: pairs this phone with a meshtray
// device, then is a small remote for it.
//
// Wire protocol: pairing/doc.go. GET /pair/issuer names the device;
// POST /pair/claim {code, name, os, nonce, requested_scopes} answers
// {request_id, poll_token, sas, server_nonce, expires, issuer}; the page
// computes the SAS itself (pairing.SAS, version 1) and refuses a mismatch;
// GET /pair/status/{id} with `Authorization: Bearer <poll_token>`
// long-polls until approved (the grant token, once), denied or expired.
// The grant token then goes in `Authorization: Bearer` to
// GET /pair/whoami, GET /nodes/manifest, POST /nodes/invoke and
// POST /a2a/v1 (A2A 0.3.0 JSON-RPC, message/stream).
//
// Secrets (code, nonce, poll token, grant token) never go in a URL: the
// code arrives in the fragment (never sent to a server) and is removed
// from the address bar once claimed. The grant token is kept in
// localStorage under "meshtray.grant.<device ID>". Everything the device
// answers is shown with textContent, never parsed as HTML.
"use strict";

(() => {
  const STORE_PREFIX = "meshtray.grant.";
  const NAME_KEY = "meshtray.phone-name";
  const SAS_TAG = "meshtray-sas-v1";
  const CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"; // pairing.CodeAlphabet
  const CODE_LEN = 8;
  const MAX_STREAM_BUFFER = 1 << 20; // bytes of one unfinished SSE event

  const $ = (id) => document.getElementById(id);

  const st = {
    issuer: null, // {id, name, os, fp} from GET /pair/issuer
    code: "", // from the fragment
    fp: "", // from the fragment ("" when absent)
    fpBad: false, // the fragment had an fp that does not parse
    grant: null, // the stored record: {token, grant_id, scopes, issuer, phone_name, paired_at}
    poll: null, // AbortController of the status long-poll
    manifest: null,
    task: null, // {id, contextId, state}
    rpcID: 0,
    bannerKind: "",
  };

  // ---------------------------------------------------------------- helpers

  class NetError extends Error {}

  // call sends one request to this origin. It never follows redirects (a
  // token must not travel elsewhere) and sends no cookies.
  async function call(method, path, { body, token, signal, accept } = {}) {
    const headers = {};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (token) headers.Authorization = "Bearer " + token;
    if (accept) headers.Accept = accept;
    try {
      return await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
        cache: "no-store",
        credentials: "omit",
        redirect: "error",
        referrerPolicy: "no-referrer",
      });
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new NetError(String(e && e.message));
    }
  }

  async function readJSON(resp) {
    try {
      return await resp.json();
    } catch {
      return null;
    }
  }

  async function errorText(resp) {
    const j = await readJSON(resp);
    return j && typeof j.error === "string" ? j.error : resp.status + " " + resp.statusText;
  }

  function retryAfter(resp) {
    const n = parseInt(resp.headers.get("Retry-After") || "", 10);
    return Number.isFinite(n) && n > 0 ? Math.min(n, 300) : 5;
  }

  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(resolve, ms);
      if (signal) {
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          reject(new DOMException("aborted", "AbortError"));
        }, { once: true });
      }
    });
  }

  function randomToken(n) {
    const b = new Uint8Array(n);
    crypto.getRandomValues(b);
    let s = "";
    for (const x of b) s += String.fromCharCode(x);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function newID() {
    return typeof crypto.randomUUID === "function" ? crypto.randomUUID() : randomToken(16);
  }

  // computeSAS is pairing.SAS (version 1): SHA-256 over the NUL-joined
  // parts, first 4 bytes big-endian mod 10^6, six digits.
  async function computeSAS(fp, deviceID, nonce, serverNonce, requestID) {
    const data = new TextEncoder().encode([SAS_TAG, fp, deviceID, nonce, serverNonce, requestID].join("\u0000"));
    const d = await crypto.subtle.digest("SHA-256", data);
    return String(new DataView(d).getUint32(0) % 1000000).padStart(6, "0");
  }

  const spacedSAS = (s) => (s.length === 6 ? s.slice(0, 3) + " " + s.slice(3) : s);

  function normFP(s) {
    const h = s.toLowerCase().replace(/[^0-9a-f]/g, "");
    return /^[0-9a-f]{64}$/.test(h) ? h : "";
  }

  function normCode(s) {
    return s.toUpperCase().replace(/[\s-]/g, "");
  }

  function validCode(c) {
    return c.length === CODE_LEN && [...c].every((ch) => CODE_ALPHABET.includes(ch));
  }

  function shortID(id) {
    return (id || "").slice(0, 7);
  }

  function clip(s, n) {
    s = String(s == null ? "" : s);
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  // platform guesses this phone's OS and a default name from the user agent.
  function platform() {
    const ua = navigator.userAgent;
    let m;
    let browser = "";
    if ((m = ua.match(/(SamsungBrowser|Firefox|FxiOS|EdgA|EdgiOS|CriOS|OPR)\/(\d+)/))) {
      browser = { FxiOS: "Firefox", EdgA: "Edge", EdgiOS: "Edge", CriOS: "Chrome", OPR: "Opera", SamsungBrowser: "Samsung Internet" }[m[1]] || m[1];
      browser += " " + m[2];
    } else if ((m = ua.match(/Chrome\/(\d+)/))) {
      browser = "Chrome " + m[1];
    } else if ((m = ua.match(/Version\/(\d+)[\d.]* .*Safari/))) {
      browser = "Safari " + m[1];
    }
    let os = "";
    let kind = "Phone";
    if ((m = ua.match(/Android (\d+(?:\.\d+)?)/))) {
      os = "Android " + m[1];
      kind = /Mobile/.test(ua) ? "Android phone" : "Android tablet";
    } else if ((m = ua.match(/(iPhone|iPad|iPod)[^)]* OS (\d+)[_.](\d+)/))) {
      os = (m[1] === "iPad" ? "iPadOS " : "iOS ") + m[2] + "." + m[3];
      kind = m[1];
    } else if (/Macintosh/.test(ua) && navigator.maxTouchPoints > 1) {
      os = "iPadOS";
      kind = "iPad";
    } else if (/Windows/.test(ua)) {
      os = "Windows";
      kind = "Windows browser";
    } else if (/Mac OS X/.test(ua)) {
      os = "macOS";
      kind = "Mac browser";
    } else if (/CrOS/.test(ua)) {
      os = "ChromeOS";
      kind = "Chromebook";
    } else if (/Linux/.test(ua)) {
      os = "Linux";
      kind = "Linux browser";
    }
    return { os: [os, browser].filter(Boolean).join(", "), kind };
  }

  // ------------------------------------------------------------------ views

  function show(id, { focus = true } = {}) {
    for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== id;
    const view = $(id);
    view.removeAttribute("aria-busy");
    if (focus) {
      const h = view.querySelector("h1");
      if (h) {
        h.tabIndex = -1;
        h.focus({ preventScroll: true });
      }
      window.scrollTo(0, 0);
    }
  }

  // banner shows a notice above the views: kind ok | warn | bad | info;
  // tag marks what raised it (so a later success of that kind clears it).
  function banner(kind, text, tag = "") {
    const b = $("banner");
    b.className = "notice " + kind;
    b.textContent = text;
    b.hidden = false;
    st.bannerKind = tag;
  }

  function clearBanner(tag) {
    if (tag && st.bannerKind !== tag) return;
    $("banner").hidden = true;
    st.bannerKind = "";
  }

  function fillIssuer() {
    const iss = st.issuer;
    for (const el of document.querySelectorAll("[data-issuer]")) {
      const k = el.dataset.issuer;
      el.textContent = k === "short" ? shortID(iss.id) : k === "os" ? iss.os || "Unknown OS" : iss[k] || "";
    }
    document.title = "Pair with " + iss.name + " · meshtray";
  }

  function renderFP(fp) {
    const el = $("fp");
    el.textContent = "";
    const up = fp.toUpperCase();
    for (let i = 0; i < up.length; i += 2) {
      const s = document.createElement("span");
      s.textContent = up.slice(i, i + 2);
      el.appendChild(s);
    }
    el.setAttribute("aria-label", "Certificate fingerprint: " + up.match(/.{2}/g).join(" "));
  }

  // problem shows a final state with one way out.
  function problem({ title, text, hint = "", action, onAction, tone = "bad", icon = "!" }) {
    clearBanner();
    $("tagline").textContent = "Pair this phone";
    $("problem-card").className = "card problem " + tone;
    $("problem-icon").textContent = icon;
    $("problem-title").textContent = title;
    $("problem-text").textContent = text;
    $("problem-hint").textContent = hint;
    const btn = $("problem-action");
    btn.textContent = action;
    btn.onclick = onAction;
    show("view-problem");
  }

  const again = () => showPair({ clearCode: true });

  // ------------------------------------------------------------------ start

  async function boot() {
    const p = new URLSearchParams(location.hash.slice(1));
    st.code = normCode(p.get("c") || "");
    const rawFP = p.get("fp") || "";
    st.fp = normFP(rawFP);
    st.fpBad = rawFP !== "" && st.fp === "";
    clearBanner();
    show("view-loading", { focus: false });
    let resp;
    try {
      resp = await call("GET", "/pair/issuer");
    } catch (e) {
      return problem({
        title: "Cannot reach the computer",
        text: "This phone got no answer from the computer that showed the QR code.",
        hint: "Check that the phone is on the same network as the computer (Wi-Fi, or the tailnet) and that meshtray runs there, then try again.",
        action: "Try again",
        onAction: boot,
      });
    }
    const iss = resp.ok ? await readJSON(resp) : null;
    if (!iss || typeof iss.id !== "string" || typeof iss.name !== "string" || !normFP(String(iss.fp || ""))) {
      return problem({
        title: "This is not a meshtray device",
        text: "The address answered, but not as a meshtray device that can pair (" + resp.status + ").",
        hint: "Scan the QR code again, or check the address.",
        action: "Try again",
        onAction: boot,
      });
    }
    iss.fp = normFP(iss.fp);
    st.issuer = iss;
    fillIssuer();
    st.grant = loadGrant(iss.id);
    if (st.grant && !st.code) return openRemote();
    showPair({ focus: false });
  }

  function showPair({ clearCode = false, focus = true } = {}) {
    if (st.poll) st.poll.abort();
    const iss = st.issuer;
    $("tagline").textContent = "Pair this phone";
    if (clearCode) st.code = "";
    $("code").value = st.code;
    $("code").removeAttribute("aria-invalid");
    const saved = localStorage.getItem(NAME_KEY);
    $("phone-name").value = saved || platform().kind;
    renderFP(iss.fp);
    const https = location.protocol === "https:";
    $("cert-https").hidden = !https;
    $("cert-http").hidden = https;
    const mismatch = fpMismatch();
    $("cert").open = https || mismatch;
    $("cert-summary").textContent = https ? "About the “not secure” warning" : "Certificate fingerprint";
    $("fp-mismatch").hidden = !mismatch;
    $("fp-confirm-box").hidden = !https || mismatch;
    $("claim-btn").disabled = claimBlocked();
    $("already").hidden = !st.grant;
    show("view-pair", { focus });
  }

  // fpMismatch: the QR code names another certificate than the computer
  // at this address reports (a wrong address, or a stale QR code).
  function fpMismatch() {
    return st.fpBad || (st.fp !== "" && st.fp !== st.issuer.fp);
  }

  // claimBlocked: Pair stays disabled on a fingerprint mismatch and, over
  // HTTPS, until the person confirms they compared the fingerprint in the
  // browser's certificate details: page script cannot see the certificate
  // of its own connection, so only that comparison detects a relay.
  function claimBlocked() {
    return fpMismatch() || (location.protocol === "https:" && !$("fp-confirm").checked);
  }

  // ------------------------------------------------------------------ claim

  async function claim(ev) {
    ev.preventDefault();
    clearBanner();
    const iss = st.issuer;
    const codeEl = $("code");
    const code = normCode(codeEl.value);
    if (!validCode(code)) {
      codeEl.setAttribute("aria-invalid", "true");
      codeEl.focus();
      banner("bad", "A pairing code has " + CODE_LEN + " characters: digits 2–9 and capital letters (no 0, 1, I, L, O or U). Check it on the computer.");
      return;
    }
    codeEl.removeAttribute("aria-invalid");
    const name = $("phone-name").value.trim();
    if (!name) {
      $("phone-name").setAttribute("aria-invalid", "true");
      $("phone-name").focus();
      banner("bad", "Give this phone a name, so the computer can show who is asking.");
      return;
    }
    $("phone-name").removeAttribute("aria-invalid");
    if (!window.isSecureContext || !crypto.subtle) {
      return problem({
        title: "This browser cannot check the code",
        text: "The verification code is computed with the browser’s WebCrypto, which it offers only on secure pages (https, or this computer’s own loopback address).",
        hint: "Open the https address the computer shows.",
        action: "Back",
        onAction: () => showPair(),
      });
    }
    try {
      localStorage.setItem(NAME_KEY, name);
    } catch {
      // private browsing: the name is only a convenience
    }
    const pinned = st.fp || iss.fp;
    const nonce = randomToken(32);
    const btn = $("claim-btn");
    btn.disabled = true;
    $("claim-label").hidden = true;
    $("claim-busy").hidden = false;
    let resp;
    try {
      resp = await call("POST", "/pair/claim", {
        body: { code, name, os: platform().os, nonce, requested_scopes: ["agent", "node"] },
      });
    } catch (e) {
      banner("bad", "Cannot reach " + iss.name + ". Check that this phone is on the same network and try again.");
      return;
    } finally {
      $("claim-label").hidden = false;
      $("claim-busy").hidden = true;
      btn.disabled = claimBlocked();
    }
    if (!resp.ok) return claimRefused(resp);
    const cr = await readJSON(resp);
    if (!cr || typeof cr.request_id !== "string" || typeof cr.poll_token !== "string" || typeof cr.sas !== "string" || typeof cr.server_nonce !== "string") {
      return banner("bad", "The computer gave an answer this page does not understand. Update meshtray on both sides.");
    }
    // The code is used now: keep it out of the address bar and history.
    history.replaceState(null, "", location.pathname);
    st.code = "";
    const answeredFP = normFP(String((cr.issuer && cr.issuer.fp) || ""));
    if (answeredFP !== pinned) {
      return problem({
        title: "Not the expected computer",
        text: "The computer that answered the claim has another certificate than the one in the QR code. This phone will not pair with it.",
        hint: "Deny the request on the computer if one appeared, and scan the QR code again.",
        action: "Start over",
        onAction: again,
      });
    }
    const mine = await computeSAS(pinned, "", nonce, cr.server_nonce, cr.request_id);
    if (mine !== cr.sas) {
      return problem({
        title: "Verification codes differ",
        text: "This phone computed " + spacedSAS(mine) + ", but the answer it got says " + spacedSAS(cr.sas) + ". Something between this phone and the computer changed the messages, so this phone will not pair.",
        hint: "Deny the request on the computer. Then pair again on a network you trust.",
        action: "Start over",
        onAction: again,
      });
    }
    $("sas").textContent = spacedSAS(mine);
    $("sas").setAttribute("aria-label", "Verification code " + mine.split("").join(" "));
    $("sas-check").textContent = "Approve on the computer only if it shows this same code.";
    const exp = new Date(cr.expires);
    $("sas-expires").textContent = isNaN(exp) ? "" : "The request waits for approval until " + exp.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) + ".";
    $("sas-waiting").hidden = false;
    show("view-sas");
    poll(cr, pinned);
  }

  async function claimRefused(resp) {
    const iss = st.issuer;
    const msg = await errorText(resp);
    switch (resp.status) {
      case 403:
        return problem({
          title: "That code does not work",
          text: "The code is wrong, already used, or expired. A code works once, for 10 minutes, and dies after 5 wrong tries.",
          hint: "Start pairing again on " + iss.name + " and scan the new QR code.",
          action: "Enter another code",
          onAction: again,
        });
      case 429: {
        const s = retryAfter(resp);
        const btn = $("claim-btn");
        btn.disabled = true;
        banner("warn", "Too many tries from this phone. Wait " + s + " seconds, then try again.");
        setTimeout(() => {
          btn.disabled = claimBlocked();
          clearBanner();
        }, s * 1000);
        return;
      }
      case 503:
        return banner("warn", iss.name + " has too many pairing requests waiting. Try again in a minute.");
      default:
        return banner("bad", "The computer refused the claim: " + clip(msg, 200));
    }
  }

  // poll long-polls the request's status until a decision.
  async function poll(cr, pinned) {
    const iss = st.issuer;
    const ctrl = new AbortController();
    st.poll = ctrl;
    const deadline = (Date.parse(cr.expires) || Date.now() + 5 * 60000) + 60000;
    const path = "/pair/status/" + encodeURIComponent(cr.request_id);
    let failures = 0;
    try {
      for (;;) {
        let resp;
        try {
          resp = await call("GET", path, { token: cr.poll_token, signal: ctrl.signal });
        } catch (e) {
          if (e.name === "AbortError") return;
          if (Date.now() > deadline) {
            return problem({
              title: "Lost contact",
              text: "This phone lost contact with " + iss.name + " while waiting, and the request has expired since.",
              hint: "Start pairing again on the computer when the phone is back on its network.",
              action: "Enter another code",
              onAction: again,
            });
          }
          failures++;
          banner("warn", "Lost contact with " + iss.name + ". Retrying…", "net");
          await sleep(Math.min(2000 * failures, 10000), ctrl.signal);
          continue;
        }
        failures = 0;
        clearBanner("net");
        if (resp.status === 429 || resp.status >= 500) {
          await sleep(retryAfter(resp) * 1000, ctrl.signal);
          continue;
        }
        if (resp.status === 404) {
          return problem({
            title: "Request no longer known",
            text: iss.name + " no longer knows this pairing request: it expired, or its answer was already collected.",
            hint: "Start pairing again on the computer.",
            action: "Enter another code",
            onAction: again,
          });
        }
        const s = resp.ok ? await readJSON(resp) : null;
        if (!s && resp.ok) {
          // A cut answer (the computer stopped mid-reply): like a lost
          // connection, try again.
          failures++;
          banner("warn", "Lost contact with " + iss.name + ". Retrying…", "net");
          await sleep(Math.min(2000 * failures, 10000), ctrl.signal);
          continue;
        }
        if (!s) {
          return problem({
            title: "Unexpected answer",
            text: "The computer answered the status request with " + resp.status + ": " + clip(await errorText(resp), 200),
            action: "Start over",
            onAction: again,
          });
        }
        switch (s.status) {
          case "pending":
            continue;
          case "approved":
            if (typeof s.token !== "string" || !s.token) break;
            return paired(s, pinned);
          case "denied":
            return problem({
              title: "Pairing declined",
              text: "The owner of " + iss.name + " declined this pairing.",
              hint: "If that was a mistake, start pairing again on the computer.",
              action: "Enter another code",
              onAction: again,
            });
          case "expired":
            return problem({
              title: "Request expired",
              text: "Nobody approved the request on " + iss.name + " in time.",
              hint: "Start pairing again on the computer and scan the new QR code.",
              action: "Enter another code",
              onAction: again,
              tone: "warn",
            });
        }
        return problem({
          title: "Unexpected answer",
          text: "The computer answered with a status this page does not know (" + clip(s.status, 40) + ").",
          action: "Start over",
          onAction: again,
        });
      }
    } catch (e) {
      if (e.name !== "AbortError") throw e;
    } finally {
      if (st.poll === ctrl) st.poll = null;
    }
  }

  function stopWaiting() {
    if (st.poll) st.poll.abort();
    showPair({ clearCode: true });
    banner("info", "Stopped waiting. The request expires on the computer by itself; you can also deny it there.");
  }

  // ----------------------------------------------------------------- grants

  function loadGrant(deviceID) {
    try {
      const rec = JSON.parse(localStorage.getItem(STORE_PREFIX + deviceID) || "null");
      return rec && typeof rec.token === "string" && rec.token ? rec : null;
    } catch {
      return null;
    }
  }

  function saveGrant(rec) {
    try {
      localStorage.setItem(STORE_PREFIX + st.issuer.id, JSON.stringify(rec));
      return true;
    } catch {
      return false;
    }
  }

  function forgetGrant() {
    try {
      localStorage.removeItem(STORE_PREFIX + st.issuer.id);
    } catch {
      // nothing stored
    }
    st.grant = null;
  }

  function paired(s, pinned) {
    const iss = st.issuer;
    const rec = {
      token: s.token,
      grant_id: s.grant_id || "",
      scopes: Array.isArray(s.scopes) ? s.scopes : [],
      issuer: { id: iss.id, name: iss.name, os: iss.os || "", fp: pinned },
      phone_name: $("phone-name").value.trim(),
      paired_at: new Date().toISOString(),
    };
    st.grant = rec;
    const kept = saveGrant(rec);
    openRemote({ justPaired: true, kept });
  }

  // authed sends a request with the grant token. A 401 means the grant is
  // revoked (forget it, offer to pair again) or paused (keep it, say so);
  // it then returns null, as for a network error.
  async function authed(method, path, body, opts = {}) {
    const iss = st.issuer;
    let resp;
    try {
      resp = await call(method, path, { body, token: st.grant.token, ...opts });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      banner("bad", "Cannot reach " + iss.name + ". Check that this phone is on the same network as it and that meshtray runs there.", "net");
      return null;
    }
    clearBanner("net");
    if (resp.status === 401) {
      const challenge = resp.headers.get("WWW-Authenticate") || "";
      if (/error_description="grant paused"/.test(challenge)) {
        $("paused").hidden = false;
        return null;
      }
      forgetGrant();
      problem({
        title: "No longer paired",
        text: iss.name + " no longer accepts this phone’s access key: its owner revoked it or gave it a new one. This phone forgot the old key.",
        hint: "To use it again, start pairing on the computer and scan the new QR code.",
        action: "Pair again",
        onAction: again,
      });
      return null;
    }
    $("paused").hidden = true;
    return resp;
  }

  // full gives every scope but approve, which only approve itself gives.
  const hasScope = (scope) => st.grant && (st.grant.scopes.includes(scope) || (scope !== "approve" && st.grant.scopes.includes("full")));

  // ----------------------------------------------------------------- remote

  async function openRemote({ justPaired = false, kept = true } = {}) {
    const iss = st.issuer;
    $("tagline").textContent = "Remote for " + iss.name;
    renderScopes();
    $("send-result").textContent = "";
    $("caps").textContent = "";
    $("manifest-note").textContent = "Loading…";
    show("view-remote", { focus: justPaired });
    if (justPaired) {
      banner("ok", kept ? "Paired with " + iss.name + "." : "Paired with " + iss.name + ", but this browser would not store the access key: the pairing lasts only while this page is open.");
    }
    const resp = await authed("GET", "/pair/whoami");
    if (!resp) return;
    if (resp.ok) {
      const w = await readJSON(resp);
      if (w && Array.isArray(w.scopes)) {
        st.grant.scopes = w.scopes;
        st.grant.policy = w.policy || "ask";
        if (w.grant_id) st.grant.grant_id = w.grant_id;
        saveGrant(st.grant);
        renderScopes();
      }
    }
    await loadManifest();
  }

  function renderScopes() {
    const g = st.grant;
    const when = new Date(g.paired_at);
    const parts = [];
    const names = { agent: "its agent", node: "its capabilities", full: "its agent, its capabilities and its settings (A2A, agents), but not approving requests", approve: "its approval queue" };
    if (g.scopes.length) parts.push("This phone may use " + g.scopes.map((s) => names[s] || s).join(" and ") + ".");
    if (!isNaN(when)) parts.push("Paired " + when.toLocaleDateString() + ".");
    $("remote-scopes").textContent = parts.join(" ");
    const node = hasScope("node");
    const agent = hasScope("agent");
    $("send-form").hidden = !node;
    $("a2a-form").hidden = !agent;
  }

  async function loadManifest() {
    const note = $("manifest-note");
    if (!hasScope("node")) {
      note.textContent = "This phone’s access does not include the computer’s capabilities.";
      setCapButtons();
      return;
    }
    const resp = await authed("GET", "/nodes/manifest");
    if (!resp) {
      note.textContent = "Not loaded.";
      return;
    }
    if (!resp.ok) {
      note.textContent = resp.status === 403 ? "This phone’s access does not include the computer’s capabilities." : "Could not load the list: " + clip(await errorText(resp), 160);
      return;
    }
    const m = await readJSON(resp);
    if (!m || !Array.isArray(m.capabilities)) {
      note.textContent = "The computer sent a list this page does not understand.";
      return;
    }
    st.manifest = m;
    if (m.device && m.device.name) {
      // The manifest is authenticated; prefer its words.
      st.issuer.name = m.device.name;
      if (m.device.os) st.issuer.os = m.device.os;
      fillIssuer();
      $("tagline").textContent = "Remote for " + st.issuer.name;
    }
    note.textContent = m.capabilities.length + " capabilities. “Ask” means its owner approves each call.";
    const list = $("caps");
    list.textContent = "";
    for (const c of m.capabilities) {
      const li = document.createElement("li");
      const n = document.createElement("div");
      n.className = "cap-name";
      n.textContent = c.name;
      const d = document.createElement("p");
      d.className = "cap-desc";
      d.textContent = c.description || "";
      const tags = document.createElement("div");
      tags.className = "tags";
      const tag = (text, cls) => {
        const t = document.createElement("span");
        t.className = "tag" + (cls ? " " + cls : "");
        t.textContent = text;
        tags.appendChild(t);
      };
      if (c.effects) tag(c.effects);
      if (c.approval === "ask") tag("ask first");
      if (c.approval === "deny") tag("blocked", "off");
      if (!c.available) tag("unavailable" + (c.reason ? ": " + clip(c.reason, 120) : ""), "off");
      li.append(n, d, tags);
      list.appendChild(li);
    }
    setCapButtons();
  }

  function capability(name) {
    return st.manifest ? st.manifest.capabilities.find((c) => c.name === name) : null;
  }

  // setCapButtons enables the send buttons whose capability can run.
  function setCapButtons() {
    const notes = [];
    for (const btn of [$("notify-btn"), $("clip-btn")]) {
      const c = capability(btn.dataset.cap);
      const ok = !!c && c.available && c.approval !== "deny";
      btn.disabled = !ok;
      if (!ok && st.manifest) {
        const what = btn.dataset.cap === "clipboard.write" ? "Clipboard" : "Notifications";
        notes.push(what + ": " + (!c ? "not offered by this computer" : c.approval === "deny" ? "blocked by its owner" : "unavailable, " + (c.reason || "not on this computer")) + ".");
      }
    }
    $("send-note").textContent = notes.join(" ");
    $("send-note").hidden = notes.length === 0;
  }

  async function invoke(capName, params, doneText) {
    const iss = st.issuer;
    const out = $("send-result");
    const c = capability(capName);
    // The stricter of the capability's and this grant's policy applies.
    const asks = (c && c.approval === "ask") || st.grant.policy !== "allow";
    const waitText = "Waiting for the owner of " + iss.name + " to approve it there…";
    out.className = "result wait";
    out.textContent = asks ? waitText : "Sending…";
    for (const b of [$("notify-btn"), $("clip-btn")]) b.disabled = true;
    try {
      const resp = await authed("POST", "/nodes/invoke", { capability: capName, params });
      if (!resp) {
        out.textContent = "";
        return;
      }
      const j = await readJSON(resp);
      if (resp.ok) {
        const d = (j && j.data) || {};
        if (capName === "system.notify" && d.delivered === false) {
          out.className = "result bad";
          out.textContent = "Not shown on " + iss.name + ": " + clip(d.reason || "no notification service", 200);
          return;
        }
        out.className = "result ok";
        out.textContent = "✓ " + doneText;
        return;
      }
      const why = (j && j.error) || resp.statusText;
      out.className = "result bad";
      switch (resp.status) {
        case 403:
          out.textContent = "Refused: " + clip(why, 200);
          break;
        case 409:
          out.textContent = "Unavailable on " + iss.name + ": " + clip(why, 200);
          break;
        case 504:
          out.textContent = "No answer in time.";
          break;
        default:
          out.textContent = "Failed (" + resp.status + "): " + clip(why, 200);
      }
    } finally {
      setCapButtons();
    }
  }

  function sendNotify(ev) {
    ev.preventDefault();
    const text = $("send-text").value.trim();
    if (!text) {
      $("send-text").focus();
      return;
    }
    const nl = text.indexOf("\n");
    const first = nl < 0 ? text : text.slice(0, nl);
    let title = first.trim();
    let body = nl < 0 ? "" : text.slice(nl + 1).trim();
    if (title.length > 120) {
      title = title.slice(0, 119) + "…";
      body = text;
    }
    invoke("system.notify", { title, body }, "Shown on " + st.issuer.name + ".");
  }

  function sendClipboard() {
    const text = $("send-text").value;
    if (!text.trim()) {
      $("send-text").focus();
      return;
    }
    invoke("clipboard.write", { text }, "Copied to the clipboard of " + st.issuer.name + ".");
  }

  // ---------------------------------------------------------------------- A2A

  const STATE_LABEL = {
    submitted: "Submitted",
    working: "Working",
    "input-required": "Needs your answer",
    "auth-required": "Needs authorization",
    completed: "Completed",
    failed: "Failed",
    canceled: "Canceled",
    rejected: "Rejected",
    unknown: "Unknown",
  };
  const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);
  const TONE = { completed: "ok", failed: "bad", rejected: "bad", canceled: "warn", "input-required": "warn", "auth-required": "warn" };

  function messageText(m) {
    if (!m || !Array.isArray(m.parts)) return "";
    return m.parts
      .filter((p) => p && p.kind === "text" && typeof p.text === "string")
      .map((p) => p.text)
      .join("\n");
  }

  function resetTask() {
    st.task = null;
    $("task").hidden = true;
    $("task-ask").textContent = "";
    $("task-steps").textContent = "";
    $("task-msg").textContent = "";
    $("task-artifacts").textContent = "";
    $("a2a-label").textContent = "Message";
    $("a2a-btn").textContent = "Send";
    $("a2a-new").hidden = true;
  }

  // setState records a task state: one step per distinct state (a state
  // reported again, e.g. submitted and then "waiting for approval", updates
  // its step), the last one current.
  function setState(state, msg) {
    const iss = st.issuer;
    const t = st.task;
    let label = STATE_LABEL[state] || state;
    const text = messageText(msg);
    if (state === "submitted" && /approv/i.test(text)) label = "Waiting for approval on " + iss.name;
    const steps = $("task-steps");
    const last = steps.lastElementChild;
    if (last && last.dataset.state === state && last.dataset.label !== label) {
      last.dataset.label = label;
      last.textContent = label;
    } else if (!last || last.dataset.label !== label) {
      if (last) last.className = "done";
      const li = document.createElement("li");
      li.dataset.label = label;
      li.dataset.state = state;
      li.textContent = label;
      steps.appendChild(li);
    }
    const cur = steps.lastElementChild;
    cur.className = state === "failed" || state === "rejected" ? "failed" : TERMINAL.has(state) ? "done" : "current";
    const badge = $("task-state");
    badge.textContent = label;
    badge.className = "badge " + (TONE[state] || "");
    badge.dataset.state = state;
    // The approval note is the step itself; a result the artifacts show
    // already is not repeated.
    if (text && !(state === "submitted" && /approv/i.test(text)) && !artifactTexts().includes(text)) {
      $("task-msg").textContent = text;
    } else if (TERMINAL.has(state)) {
      $("task-msg").textContent = ""; // "running …" is over
    }
    t.state = state;
    if (state === "input-required") {
      $("a2a-label").textContent = "Your answer";
      $("a2a-btn").textContent = "Answer";
      $("a2a-new").hidden = false;
    } else if (TERMINAL.has(state)) {
      $("a2a-label").textContent = "Message";
      $("a2a-btn").textContent = "Send";
      $("a2a-new").hidden = true;
    }
  }

  function artifactTexts() {
    return [...document.querySelectorAll("#task-artifacts .artifact > p")].map((p) => p.textContent);
  }

  function addArtifact(a, append) {
    if (!a) return;
    const box = $("task-artifacts");
    const id = String(a.artifactId || "");
    let el = [...box.children].find((c) => c.dataset.id === id);
    if (!el) {
      el = document.createElement("div");
      el.className = "artifact";
      el.dataset.id = id;
      const h = document.createElement("h3");
      h.textContent = a.name ? "Result: " + a.name : "Result";
      el.appendChild(h);
      box.appendChild(el);
    } else if (!append) {
      while (el.children.length > 1) el.lastElementChild.remove();
    }
    // The summary (text) before the data it sums up.
    const parts = (a.parts || []).filter(Boolean);
    parts.sort((x, y) => (x.kind === "text" ? 0 : 1) - (y.kind === "text" ? 0 : 1));
    for (const p of parts) {
      if (p.kind === "text" && $("task-msg").textContent === p.text) $("task-msg").textContent = "";
      if (p.kind === "text") {
        const para = document.createElement("p");
        para.textContent = p.text;
        el.appendChild(para);
      } else if (p.kind === "data") {
        const pre = document.createElement("pre");
        pre.textContent = JSON.stringify(p.data, null, 2);
        el.appendChild(pre);
      } else if (p.kind === "file") {
        const para = document.createElement("p");
        para.textContent = "File: " + ((p.file && (p.file.name || p.file.uri)) || "unnamed");
        el.appendChild(para);
      }
    }
  }

  // onEvent applies one A2A result (Task, Message, status or artifact update).
  function onEvent(r) {
    if (!r || typeof r !== "object") return;
    const t = st.task;
    switch (r.kind) {
      case "task":
        t.id = r.id;
        t.contextId = r.contextId;
        for (const a of r.artifacts || []) addArtifact(a, false);
        if (r.status) setState(r.status.state, r.status.message);
        break;
      case "status-update":
        if (r.taskId) t.id = r.taskId;
        if (r.contextId) t.contextId = r.contextId;
        if (r.status) setState(r.status.state, r.status.message);
        break;
      case "artifact-update":
        addArtifact(r.artifact, !!r.append);
        break;
      case "message":
        $("task-msg").textContent = messageText(r);
        setState("completed");
        break;
    }
  }

  function rpcFailed(err) {
    const iss = st.issuer;
    const known = {
      "-32001": "The task is no longer known to " + iss.name + ".",
      "-32010": iss.name + " runs too many tasks from this phone already; wait for them to finish.",
      "-32011": iss.name + " is busy; try again later.",
      "-32012": "The agent of " + iss.name + " is not available right now.",
    };
    const text = known[String(err && err.code)] || "The agent refused the request: " + clip((err && err.message) || "unknown error", 200);
    if (!st.task.state) setState("failed");
    $("task-msg").textContent = text;
    $("task-state").textContent = "Error";
    $("task-state").className = "badge bad";
    $("a2a-new").hidden = true;
    st.task.state = "failed";
  }

  async function sendA2A(ev) {
    ev.preventDefault();
    const iss = st.issuer;
    const box = $("a2a-text");
    const text = box.value.trim();
    if (!text) {
      box.focus();
      return;
    }
    const msg = { kind: "message", messageId: newID(), role: "user", parts: [{ kind: "text", text }] };
    if (st.task && st.task.state === "input-required" && st.task.id) {
      msg.taskId = st.task.id;
      msg.contextId = st.task.contextId;
    } else {
      resetTask();
      st.task = { id: "", contextId: "", state: "" };
    }
    $("task").hidden = false;
    $("task-ask").textContent = text;
    const stream = typeof ReadableStream !== "undefined" && typeof TextDecoder !== "undefined";
    const req = { jsonrpc: "2.0", id: ++st.rpcID, method: stream ? "message/stream" : "message/send", params: { message: msg } };
    const btn = $("a2a-btn");
    btn.disabled = true;
    box.value = "";
    if (!st.task.state) {
      $("task-state").textContent = "Sending…";
      $("task-state").className = "badge";
    }
    try {
      const resp = await authed("POST", "/a2a/v1", req, { accept: stream ? "text/event-stream" : "application/json" });
      if (!resp) return;
      if (resp.status === 403) {
        rpcFailed({ message: "this phone’s access does not include the agent of " + iss.name });
        return;
      }
      if (!resp.ok) {
        rpcFailed({ message: "HTTP " + resp.status + ": " + (await errorText(resp)) });
        return;
      }
      const ct = resp.headers.get("Content-Type") || "";
      if (ct.startsWith("text/event-stream") && resp.body) {
        await readStream(resp.body);
      } else {
        const j = await readJSON(resp);
        if (j && j.error) rpcFailed(j.error);
        else if (j) onEvent(j.result);
      }
    } catch (e) {
      if (e instanceof NetError || e.name === "TypeError") {
        banner("bad", "Lost contact with " + iss.name + " while the task ran.", "net");
      } else {
        throw e;
      }
    } finally {
      btn.disabled = false;
    }
  }

  // readStream reads an SSE stream of JSON-RPC responses (A2A 0.3.0 §7.2:
  // one `data:` line per event) until it ends.
  async function readStream(body) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""))
          .join("\n");
        if (!data) continue; // a comment (keep-alive)
        let j;
        try {
          j = JSON.parse(data);
        } catch {
          continue;
        }
        if (j.error) {
          rpcFailed(j.error);
          reader.cancel();
          return;
        }
        onEvent(j.result);
      }
      if (buf.length > MAX_STREAM_BUFFER) {
        reader.cancel();
        rpcFailed({ message: "the answer stream was malformed" });
        return;
      }
    }
  }

  // ------------------------------------------------------------------ wiring

  let forgetArmed = 0;
  function forget() {
    const btn = $("forget-btn");
    if (Date.now() - forgetArmed > 5000) {
      forgetArmed = Date.now();
      btn.textContent = "Tap again to forget " + st.issuer.name;
      setTimeout(() => {
        if (Date.now() - forgetArmed >= 5000) btn.textContent = "Forget this computer";
      }, 5100);
      return;
    }
    forgetArmed = 0;
    btn.textContent = "Forget this computer";
    forgetGrant();
    resetTask();
    showPair({ clearCode: true });
    banner("info", "This phone forgot its access to " + st.issuer.name + ". Its owner can remove the phone from the computer’s device list too.");
  }

  function init() {
    $("claim-form").addEventListener("submit", claim);
    $("fp-confirm").addEventListener("change", () => { $("claim-btn").disabled = claimBlocked(); });
    $("code").addEventListener("input", (e) => {
      const v = normCode(e.target.value);
      if (v !== e.target.value) e.target.value = v;
      e.target.removeAttribute("aria-invalid");
    });
    $("sas-cancel").addEventListener("click", stopWaiting);
    $("already-open").addEventListener("click", () => {
      history.replaceState(null, "", location.pathname);
      st.code = "";
      openRemote();
    });
    $("send-form").addEventListener("submit", sendNotify);
    $("clip-btn").addEventListener("click", sendClipboard);
    $("a2a-form").addEventListener("submit", sendA2A);
    $("a2a-new").addEventListener("click", () => {
      resetTask();
      $("a2a-text").focus();
    });
    $("paused-retry").addEventListener("click", () => openRemote());
    $("forget-btn").addEventListener("click", forget);
    window.addEventListener("hashchange", boot);
    boot();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
