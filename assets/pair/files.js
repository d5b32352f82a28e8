// meshtray phone page, files: send files from this phone to the computer,
// and download the files the computer offers to this phone. It runs beside
// pair.js (which pairs and keeps the grant) and shares nothing with it but
// the page and the grant it stored in localStorage
// ("meshtray.grant.<device ID>", the device ID from GET /pair/issuer).
//
// Sending (files/doc.go, "The announcement"): every picked file is hashed
// here (SHA-256), then announced with one A2A 0.3 message/send on
// /a2a/v1 (configuration.blocking false): one FilePart per file, its
// content the RFC 6920 name of its hash ("ni:///sha-256;…"), the rest of
// its manifest entry under metadata["meshtray.file"]. tasks/get is polled
// while the owner decides; once the task works, each file is PUT to
// /files/{task}/{index} in chunks (Content-Range: bytes START-END/SIZE);
// a cut PUT resumes from the offset HEAD reports (Upload-Offset). The task
// ends with the artifact "files" (a data part: {dir, files: [{path, …}]}),
// whose saved paths are shown.
//
// Hashing: crypto.subtle.digest has no incremental form, so it hashes a
// file whole in memory; files up to SUBTLE_MAX bytes go that way. Larger
// ones are read in HASH_CHUNK slices into js-sha256 (vendor/sha256.min.js,
// MIT, by Chen Yi-Cyuan; vendor/LICENSE-js-sha256.txt), so a video never
// sits whole in memory.
//
// Downloading (app/offers.go): GET /files/offers lists this grant's offers
// (polled while the page shows); each file is fetched in DL_CHUNK ranges
// (Range: bytes=START-END), so a cut resumes where it stopped; the bytes
// are checked against the offered SHA-256 before the browser saves them.
//
// The token goes only in Authorization headers, never in a URL; whatever
// the computer sends is shown with textContent.
"use strict";

(() => {
  const STORE_PREFIX = "meshtray.grant.";
  const META_KEY = "meshtray.file";
  const SUBTLE_MAX = 16 << 20; // bytes: hashed whole by WebCrypto up to this
  const HASH_CHUNK = 4 << 20; // bytes read per hashing step
  const PUT_CHUNK = 8 << 20; // bytes per PUT
  const DL_CHUNK = 8 << 20; // bytes per ranged GET
  const MAX_TRIES = 8; // attempts per chunk before giving up
  const POLL_OFFERS_MS = 4000;
  const POLL_TASK_MS = 1000;
  const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);

  const $ = (id) => document.getElementById(id);

  const st = {
    issuer: null, // {id, name} from GET /pair/issuer
    sending: false,
    offersTimer: 0,
    offersBusy: false,
    downloads: new Map(), // "offer/index" -> {blob, name} once saved
    active: new Set(), // "offer/index" being downloaded
    rpcID: 0,
  };

  // ---------------------------------------------------------------- helpers

  function token() {
    if (!st.issuer) return "";
    try {
      const rec = JSON.parse(localStorage.getItem(STORE_PREFIX + st.issuer.id) || "null");
      return rec && typeof rec.token === "string" ? rec.token : "";
    } catch {
      return "";
    }
  }

  // call sends one request to this origin with the grant token; it never
  // follows redirects and sends no cookies.
  function call(method, path, { headers = {}, body, signal } = {}) {
    const h = { ...headers };
    const tok = token();
    if (tok) h.Authorization = "Bearer " + tok;
    return fetch(path, { method, headers: h, body, signal, cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer" });
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

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const backoff = (n) => Math.min(200 * 2 ** n, 5000);

  function clip(s, n) {
    s = String(s == null ? "" : s);
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  function size(n) {
    if (n < 1024) return n + " B";
    const u = ["KB", "MB", "GB", "TB"];
    let i = -1;
    do {
      n /= 1024;
      i++;
    } while (n >= 1024 && i < u.length - 1);
    return (n >= 10 ? Math.round(n) : Math.round(n * 10) / 10) + " " + u[i];
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function hexOf(buf) {
    return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  // niURI is files.NamedInfoURI: RFC 6920's name of a SHA-256 digest.
  function niURI(hex) {
    let s = "";
    for (let i = 0; i < 64; i += 2) s += String.fromCharCode(parseInt(hex.slice(i, i + 2), 16));
    return "ni:///sha-256;" + btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // hashBlob is the lowercase hex SHA-256 of a File or Blob; onBytes(n)
  // reports how many bytes were hashed so far.
  async function hashBlob(blob, onBytes) {
    if (blob.size <= SUBTLE_MAX) {
      const d = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
      onBytes(blob.size);
      return hexOf(d);
    }
    const h = globalThis.sha256.create();
    for (let off = 0; off < blob.size; off += HASH_CHUNK) {
      h.update(await blob.slice(off, off + HASH_CHUNK).arrayBuffer());
      onBytes(Math.min(off + HASH_CHUNK, blob.size));
    }
    return h.hex();
  }

  function messageText(m) {
    if (!m || !Array.isArray(m.parts)) return "";
    return m.parts.filter((p) => p && p.kind === "text" && typeof p.text === "string").map((p) => p.text).join("\n");
  }

  async function rpc(method, params) {
    const resp = await call("POST", "/a2a/v1", {
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: ++st.rpcID, method, params }),
    });
    if (resp.status === 401) throw new Error("this phone is no longer accepted by " + st.issuer.name + " (open the page again)");
    if (resp.status === 403) throw new Error("this phone’s access does not include the agent of " + st.issuer.name);
    if (resp.status === 404) throw new Error("the agent of " + st.issuer.name + " is off: its owner can turn on “Publish A2A agent card”");
    if (!resp.ok) throw new Error("HTTP " + resp.status + ": " + clip(await errorText(resp), 200));
    const j = await readJSON(resp);
    if (!j) throw new Error("the computer answered something this page does not understand");
    if (j.error) throw new Error(clip(j.error.message || "refused (" + j.error.code + ")", 200));
    return j.result;
  }

  // ---------------------------------------------------------------- sending

  // A row of the send list: name, a state line and a progress bar.
  function fileRow(list, name, bytes) {
    const li = el("li", "file");
    const head = el("div", "file-head");
    head.append(el("span", "file-name", name), el("span", "file-size muted small", size(bytes)));
    const bar = el("progress", "file-bar");
    bar.max = 1;
    bar.value = 0;
    const line = el("p", "file-state muted small", "");
    li.append(head, bar, line);
    list.appendChild(li);
    return {
      li,
      set(frac, text, tone) {
        bar.value = Math.max(0, Math.min(1, frac));
        if (text !== undefined) line.textContent = text;
        li.dataset.state = tone || "";
      },
    };
  }

  function sendState(text, tone) {
    const s = $("files-state");
    s.textContent = text;
    s.className = "result " + (tone || "wait");
  }

  async function sendFiles(ev) {
    ev.preventDefault();
    const picked = [...$("files-pick").files];
    if (!picked.length || st.sending) return;
    st.sending = true;
    $("files-send").disabled = true;
    $("files-pick").disabled = true;
    const list = $("files-list");
    list.textContent = "";
    $("files-progress").hidden = false;
    $("files-saved").textContent = "";
    const total = picked.reduce((a, f) => a + f.size, 0);
    const overall = $("files-total");
    const rows = picked.map((f) => fileRow(list, f.name, f.size));
    const setOverall = (done, what) => {
      overall.value = total ? done / total : 1;
      $("files-total-text").textContent = what + " " + size(done) + " of " + size(total);
    };
    try {
      // 1. Hash every file.
      sendState("Checking the files…");
      const entries = [];
      let hashed = 0;
      for (let i = 0; i < picked.length; i++) {
        const f = picked[i];
        const base = hashed;
        rows[i].set(0, "Checking…");
        const sum = await hashBlob(f, (n) => {
          rows[i].set(f.size ? n / f.size : 1, "Checking… " + (f.size ? Math.floor((100 * n) / f.size) : 100) + "%");
          setOverall(base + n, "Checked");
        });
        hashed += f.size;
        rows[i].set(0, "Waiting to send");
        entries.push({ name: f.name, path: f.name, size: f.size, media_type: f.type || "", sha256: sum });
      }
      // 2. Announce them: one task on the computer.
      sendState("Asking " + st.issuer.name + "…");
      const parts = entries.map((e) => ({
        kind: "file",
        file: { name: e.name, mimeType: e.media_type || "application/octet-stream", uri: niURI(e.sha256) },
        metadata: { [META_KEY]: { path: e.path, size: e.size, sha256: e.sha256 } },
      }));
      const msg = { kind: "message", messageId: crypto.randomUUID(), role: "user", parts };
      let task = await rpc("message/send", { message: msg, configuration: { blocking: false } });
      if (!task || task.kind !== "task" || typeof task.id !== "string") throw new Error("the computer did not open a transfer");
      // 3. Wait for the owner's decision.
      task = await waitTask(task, (t) => t.status.state !== "submitted");
      if (TERMINAL.has(task.status.state)) return finished(task, rows);
      if (task.status.state !== "working") throw new Error("unexpected state " + task.status.state);
      // 4. Send the bytes.
      sendState("Sending to " + st.issuer.name + "…");
      let sent = 0;
      const saved = [];
      for (let i = 0; i < picked.length; i++) {
        const f = picked[i];
        const base = sent;
        const s = await upload(task.id, i, f, (n) => {
          rows[i].set(f.size ? n / f.size : 1, "Sending… " + (f.size ? Math.floor((100 * n) / f.size) : 100) + "%");
          setOverall(base + n, "Sent");
        });
        sent += f.size;
        saved.push(s);
        rows[i].set(1, "Sent", "ok");
      }
      setOverall(total, "Sent");
      // 5. The task's result: where each file was saved.
      sendState("Finishing…");
      task = await waitTask(task, (t) => TERMINAL.has(t.status.state));
      finished(task, rows, saved);
    } catch (e) {
      sendState("Not sent: " + clip(e && e.message, 300), "bad");
    } finally {
      st.sending = false;
      $("files-pick").disabled = false;
      $("files-send").disabled = !$("files-pick").files.length;
    }
  }

  // waitTask polls tasks/get until done(task) holds or the task ends.
  async function waitTask(task, done) {
    let waited = false;
    for (;;) {
      const s = task.status || {};
      if (s.state === "submitted") {
        const txt = messageText(s.message);
        sendState(/approv/i.test(txt) || waited ? "Waiting for approval on " + st.issuer.name + "…" : "Asking " + st.issuer.name + "…");
        $("files-state").dataset.state = "waiting";
      }
      if (done(task) || TERMINAL.has(s.state)) return task;
      await sleep(POLL_TASK_MS);
      waited = true;
      task = await rpc("tasks/get", { id: task.id, historyLength: 0 });
    }
  }

  // finished shows a task's end; saved are the files' Saved answers.
  function finished(task, rows, saved = []) {
    const state = task.status.state;
    const why = messageText(task.status.message);
    $("files-state").dataset.state = state;
    if (state !== "completed") {
      const what = { rejected: "Declined on " + st.issuer.name, canceled: "Cancelled", failed: "Failed" }[state] || state;
      sendState(what + (why ? ": " + clip(why, 300) : "."), "bad");
      for (const r of rows) r.set(0, what, "bad");
      return;
    }
    let result = null;
    for (const a of task.artifacts || []) {
      for (const p of a.parts || []) {
        if (p && p.kind === "data" && p.data && Array.isArray(p.data.files)) result = p.data;
      }
    }
    const files = result ? result.files : saved;
    const box = $("files-saved");
    box.textContent = "";
    if (result && result.dir) box.appendChild(el("p", "muted small", "Saved on " + st.issuer.name + " in " + result.dir + ":"));
    const ul = el("ul", "saved");
    files.forEach((s, i) => {
      if (!s) return;
      ul.appendChild(el("li", "", s.path));
      if (rows[i]) rows[i].set(1, "Saved as " + s.path, "ok");
    });
    box.appendChild(ul);
    sendState("✓ Sent " + files.length + (files.length === 1 ? " file" : " files") + " to " + st.issuer.name + ".", "ok");
  }

  // upload PUTs file f as index i of the transfer taskID, in chunks, from
  // the receiver's offset; a failed attempt asks for the offset again
  // (HEAD) and resumes. It returns the receiver's Saved answer.
  async function upload(taskID, i, f, onBytes) {
    const url = "/files/" + encodeURIComponent(taskID) + "/" + i;
    let fails = 0;
    let off = -1;
    for (;;) {
      try {
        if (off < 0) off = await headOffset(url);
        onBytes(off);
        let resp;
        if (f.size === 0) {
          resp = await call("PUT", url, { body: new Blob([]) });
        } else {
          const start = Math.min(off, f.size - 1);
          const end = Math.min(start + PUT_CHUNK, f.size) - 1;
          resp = await call("PUT", url, {
            headers: { "Content-Range": "bytes " + start + "-" + end + "/" + f.size, "Content-Type": "application/octet-stream" },
            body: f.slice(start, end + 1),
          });
        }
        if (resp.status === 201) {
          onBytes(f.size);
          return await readJSON(resp);
        }
        if (resp.status === 204) {
          off = parseInt(resp.headers.get("Upload-Offset") || "-1", 10);
          fails = 0;
          continue;
        }
        if (resp.status === 409 || resp.status === 429 || resp.status >= 500 && resp.status !== 507) {
          const o = parseInt(resp.headers.get("Upload-Offset") || "", 10);
          off = Number.isFinite(o) ? o : -1;
          throw new Error("HTTP " + resp.status);
        }
        // 410, 413, 422, 507, 401, 403, 404: final.
        const why = await errorText(resp);
        const final = new Error({ 410: "the transfer ended on the computer", 507: "the computer’s disk is full", 422: "the file changed while it was sent" }[resp.status] || why);
        final.final = true;
        throw final;
      } catch (e) {
        if (e.final || ++fails > MAX_TRIES) throw e;
        off = -1; // ask where to go on
        await sleep(backoff(fails));
      }
    }
  }

  async function headOffset(url) {
    const resp = await call("HEAD", url);
    if (!resp.ok) {
      const e = new Error(resp.status === 404 || resp.status === 410 ? "the transfer ended on the computer" : "HTTP " + resp.status);
      e.final = resp.status < 500 && resp.status !== 429;
      throw e;
    }
    const o = parseInt(resp.headers.get("Upload-Offset") || "0", 10);
    return Number.isFinite(o) && o >= 0 ? o : 0;
  }

  // ------------------------------------------------------------- downloads

  async function loadOffers() {
    if (st.offersBusy || !st.issuer || !token()) return;
    st.offersBusy = true;
    try {
      const resp = await call("GET", "/files/offers");
      if (!resp.ok) {
        $("offers-note").textContent = resp.status === 403 ? "This phone’s access does not include files." : resp.status === 401 ? "" : "Could not load the offers: " + clip(await errorText(resp), 160);
        return;
      }
      const offers = await readJSON(resp);
      if (Array.isArray(offers)) renderOffers(offers);
    } catch {
      // offline: the next poll tries again
    } finally {
      st.offersBusy = false;
    }
  }

  function renderOffers(offers) {
    const box = $("offers");
    const keep = new Set();
    $("offers-note").textContent = offers.length ? "" : "Nothing offered right now. Send files to this phone from the computer (meshtray send, or “Send files…” in its tray).";
    for (const o of offers) {
      if (!o || typeof o.id !== "string" || !Array.isArray(o.files)) continue;
      keep.add(o.id);
      let card = [...box.children].find((c) => c.dataset.offer === o.id);
      if (!card) {
        card = offerCard(o);
        box.appendChild(card);
      }
    }
    for (const c of [...box.children]) {
      if (!keep.has(c.dataset.offer) && !c.dataset.kept) c.remove();
    }
  }

  function offerCard(o) {
    const li = el("li", "offer");
    li.dataset.offer = o.id;
    const total = o.files.reduce((a, f) => a + (f.size || 0), 0);
    li.appendChild(el("p", "offer-head", clip(o.from || st.issuer.name, 80) + " offers " + o.files.length + (o.files.length === 1 ? " file" : " files") + " (" + size(total) + ")"));
    const exp = new Date(o.expires);
    if (!isNaN(exp)) li.appendChild(el("p", "muted small", "Until " + exp.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })));
    const ul = el("ul", "files");
    for (const f of o.files) {
      const row = fileRow(ul, clip(f.path || f.name, 200), f.size || 0);
      row.li.dataset.index = String(f.index);
      const btn = el("button", "secondary small-btn", "Download");
      btn.type = "button";
      btn.addEventListener("click", () => download(o, f, row, btn));
      row.li.appendChild(btn);
    }
    li.appendChild(ul);
    const buttons = el("div", "buttons");
    const all = el("button", "primary", "Download all");
    all.type = "button";
    all.addEventListener("click", async () => {
      all.disabled = true;
      for (const b of ul.querySelectorAll("button")) if (!b.disabled) b.click();
    });
    const decline = el("button", "secondary", "Decline");
    decline.type = "button";
    decline.addEventListener("click", async () => {
      decline.disabled = true;
      try {
        await call("DELETE", "/files/offers/" + encodeURIComponent(o.id));
      } catch {
        // gone anyway at its expiry
      }
      li.remove();
    });
    buttons.append(all, decline);
    li.appendChild(buttons);
    return li;
  }

  // download fetches offered file f in ranges, resuming after a cut,
  // checks its SHA-256 and lets the browser save it.
  async function download(o, f, row, btn) {
    const key = o.id + "/" + f.index;
    const done = st.downloads.get(key);
    if (done) return save(done.blob, done.name);
    if (st.active.has(key)) return;
    st.active.add(key);
    btn.disabled = true;
    row.li.closest(".offer").dataset.kept = "1"; // keep the card once the offer ends
    const url = "/files/offers/" + encodeURIComponent(o.id) + "/" + f.index;
    const parts = [];
    let got = 0;
    let fails = 0;
    try {
      while (got < f.size || (f.size === 0 && parts.length === 0)) {
        const end = Math.min(got + DL_CHUNK, f.size) - 1;
        let resp;
        try {
          resp = await call("GET", url, { headers: f.size ? { Range: "bytes=" + got + "-" + end } : {} });
          if (resp.status !== 206 && resp.status !== 200) {
            const e = new Error(resp.status === 410 ? "the file changed on the computer since it was offered" : resp.status === 404 ? "the offer ended" : "HTTP " + resp.status + ": " + clip(await errorText(resp), 160));
            e.final = resp.status < 500;
            throw e;
          }
          let blob = await resp.blob();
          if (resp.status === 200 && got > 0) blob = blob.slice(got); // a server that ignored Range
          parts.push(blob);
          got += blob.size;
          fails = 0;
          row.set(f.size ? got / f.size : 1, "Downloading… " + (f.size ? Math.floor((100 * got) / f.size) : 100) + "%");
          if (f.size === 0) break;
        } catch (e) {
          if (e.final || ++fails > MAX_TRIES) throw e;
          row.set(f.size ? got / f.size : 0, "Connection lost; resuming…");
          await sleep(backoff(fails));
        }
      }
      const blob = new Blob(parts, { type: f.media_type || "application/octet-stream" });
      row.set(1, "Checking…");
      const sum = await hashBlob(blob, () => {});
      if (blob.size !== f.size || sum !== f.sha256) throw Object.assign(new Error("the bytes do not match what the computer announced; not saved"), { final: true });
      const name = safeName(f.name);
      st.downloads.set(key, { blob, name });
      save(blob, name);
      row.set(1, "✓ Downloaded: " + name, "ok");
      btn.textContent = "Save again";
      btn.disabled = false;
      // Every file of the offer came: it is over on the computer too.
      const card = row.li.closest(".offer");
      if (!card.querySelector('.file:not([data-state="ok"])')) card.querySelector(".buttons").hidden = true;
    } catch (e) {
      row.set(0, "Not downloaded: " + clip(e && e.message, 200), "bad");
      btn.disabled = false;
    } finally {
      st.active.delete(key);
    }
  }

  // safeName is the offered name without path separators or control characters.
  function safeName(n) {
    const s = String(n || "file").replace(/[\u0000-\u001f\u007f/\\]/g, "_").slice(0, 200);
    return s === "." || s === ".." || s === "" ? "file" : s;
  }

  function save(blob, name) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    a.hidden = true;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 60000);
  }

  // ------------------------------------------------------------------ wiring

  function shown() {
    const v = $("view-remote");
    return !!v && !v.hidden && document.visibilityState === "visible";
  }

  async function activate() {
    const card = $("files-card");
    if (!shown()) {
      clearInterval(st.offersTimer);
      st.offersTimer = 0;
      return;
    }
    if (!st.issuer) {
      try {
        const resp = await fetch("/pair/issuer", { cache: "no-store", credentials: "omit", redirect: "error" });
        const iss = resp.ok ? await readJSON(resp) : null;
        if (!iss || typeof iss.id !== "string") return;
        st.issuer = { id: iss.id, name: String(iss.name || "the computer") };
      } catch {
        return;
      }
    }
    let scopes = [];
    try {
      const rec = JSON.parse(localStorage.getItem(STORE_PREFIX + st.issuer.id) || "null");
      scopes = rec && Array.isArray(rec.scopes) ? rec.scopes : [];
    } catch {
      scopes = [];
    }
    card.hidden = !(scopes.includes("agent") || scopes.includes("full"));
    if (card.hidden) return;
    loadOffers();
    if (!st.offersTimer) st.offersTimer = setInterval(loadOffers, POLL_OFFERS_MS);
  }

  function init() {
    if (!$("files-card")) return;
    $("files-form").addEventListener("submit", sendFiles);
    $("files-pick").addEventListener("change", () => {
      $("files-send").disabled = st.sending || !$("files-pick").files.length;
    });
    // pair.js shows and hides the remote view; follow it.
    new MutationObserver(activate).observe($("view-remote"), { attributes: true, attributeFilter: ["hidden"] });
    document.addEventListener("visibilitychange", activate);
    // The scopes pair.js refreshes from whoami land in localStorage.
    window.addEventListener("storage", activate);
    activate();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
