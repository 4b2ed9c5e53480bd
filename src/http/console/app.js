// Switchboard console: a small client of the public v1 API. The key lives in this tab's
// session storage only; it is sent in the Authorization header, never in a URL.
"use strict";

const API = "/api/v1/integrations";
const KEY = "switchboard.key";
const $ = (id) => document.getElementById(id);

// DOM builder: text is always set as text (no HTML from data).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(`${e.code || status}: ${e.message || "request failed"}`);
    this.code = e.code || String(status);
    this.status = status;
    this.details = e.details;
  }
}

// One line per kind of message (CONVENTIONS "Every kind of message, in and out"); a deleted
// message (member null) says so.
function contentSummary(m) {
  const reply = m.reply_to ? "↩ " : "";
  return reply + kindSummary(m);
}

function kindSummary(m) {
  const v = m[m.type];
  if (m.deleted_at || v === null) return "(deleted)";
  if (!v) return "";
  switch (m.type) {
    case "text": return v.body;
    case "media": return v.media_type + (v.caption ? ": " + v.caption : "");
    case "template": return v.name;
    case "interactive": {
      const r = v[v.type] || {};
      return r.title || r.text || (v.type === "nfm_reply" ? "Flow reply" : (v.body && v.body.text) || v.type);
    }
    case "reaction": return (v.emoji || "(reaction removed)") + " to " + (v.message_uuid || v.provider_message_id);
    case "location": return [v.name, v.address, v.latitude + ", " + v.longitude].filter(Boolean).join(" · ");
    case "contacts": return v.contacts.map((c) => (c.name && c.name.formatted_name) || "?").join(", ");
    case "order": return v.items.length + " item(s)" + (v.text ? ": " + v.text : "");
    case "system": return v.body || v.kind;
    case "unsupported": return "unsupported" + (v.provider_type ? " (" + v.provider_type + ")" : "");
    default: return "";
  }
}

async function api(method, path, body, headers) {
  const res = await fetch(API + path, {
    method,
    headers: Object.assign(
      { Authorization: "Bearer " + sessionStorage.getItem(KEY) },
      body !== undefined ? { "Content-Type": "application/json" } : {},
      headers || {}
    ),
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

function toast(message) {
  const t = $("toast");
  t.textContent = message;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

function errorBox(err) {
  const fields = err.details && err.details.fields;
  return h("div", { class: "error", role: "alert" },
    h("strong", {}, err.code || "error"), " ", err.message.replace(/^[^:]*: /, ""),
    fields ? h("ul", {}, fields.map((f) => h("li", {}, `${f.field}: ${f.issue}`))) : null);
}

const badgeClass = (s) => ({
  delivered: "ok", sent: "ok", read: "ok", active: "ok", received: "ok", completed: "ok",
  pending: "warn", retrying: "warn", queued: "warn", running: "warn",
  failed: "bad", retries_exhausted: "bad", disabled: "bad",
}[s] || "");
const badge = (s) => h("span", { class: "badge " + badgeClass(s) }, s);
const when = (t) => (t ? new Date(t).toLocaleString() : "—");
// To the millisecond, for the steps of a journey.
const whenPrecise = (t) => (t ? new Date(t).toLocaleString(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", fractionalSecondDigits: 3 }) : "—");

function table(columns, rows, onClick) {
  if (!rows.length) return h("p", { class: "empty" }, "Nothing here yet.");
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c[0])))),
    h("tbody", {}, rows.map((r) => {
      const tr = h("tr", onClick ? { class: "clickable", tabindex: "0" } : {},
        columns.map((c) => h("td", {}, c[1](r))));
      if (onClick) {
        tr.addEventListener("click", () => onClick(r));
        tr.addEventListener("keydown", (e) => { if (e.key === "Enter") onClick(r); });
      }
      return tr;
    }))));
}

// A list with filters and "Load more" (cursor paging; the filters stay as the cursor needs).
function pagedList(view, path, columns, onClick, filters) {
  const holder = h("div", {});
  const more = h("button", { class: "ghost", type: "button", hidden: true }, "Load more");
  let cursor = null, rows = [], query = "", generation = 0;
  async function load(reset) {
    if (reset) { cursor = null; rows = []; }
    // Only the answer to the latest request is shown: a slower answer to an earlier filter
    // must not replace it.
    const mine = ++generation;
    const q = new URLSearchParams(query);
    q.set("limit", "25");
    if (cursor) q.set("cursor", cursor);
    try {
      const page = await api("GET", path + "?" + q.toString());
      if (mine !== generation) return;
      rows = rows.concat(page.data);
      cursor = page.next_cursor;
      holder.replaceChildren(table(columns, rows, onClick));
      more.hidden = !page.has_more;
    } catch (e) { if (mine === generation) { holder.replaceChildren(errorBox(e)); more.hidden = true; } }
  }
  more.addEventListener("click", () => load(false));
  const bar = filters ? filters((q) => { query = q; load(true); }) : null;
  view.append(bar || "", holder, more);
  load(true);
  return { reload: () => load(true) };
}

const views = {
  async channels(view) {
    view.append(h("h1", {}, "Channels"));
    const holder = h("div", {});
    view.append(holder);
    try {
      const page = await api("GET", "/channels");
      holder.append(table([
        ["Slug", (c) => h("code", {}, c.slug)], ["Name", (c) => c.name], ["Type", (c) => c.type],
        ["Status", (c) => badge(c.status)], ["Sends", (c) => (c.can_send_messages ? "yes" : "no")],
        ["Default", (c) => (c.is_default ? "default" : "")],
      ], page.data));
    } catch (e) { holder.append(errorBox(e)); }
  },

  async send(view) {
    view.append(h("h1", {}, "Send a message"));
    let channels = [];
    try { channels = (await api("GET", "/channels")).data; } catch (e) { view.append(errorBox(e)); }
    const out = h("div", {});
    const ikey = () => (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()));
    const form = h("form", { class: "card", id: "send-form" },
      h("div", { class: "row" },
        h("div", {}, h("label", { for: "send-type" }, "Type"),
          h("select", { id: "send-type", name: "type" },
            h("option", { value: "text" }, "Text"), h("option", { value: "media" }, "Media"),
            h("option", { value: "template" }, "Template"))),
        h("div", {}, h("label", { for: "send-channel" }, "Channel"),
          h("select", { id: "send-channel", name: "channel" },
            h("option", { value: "" }, "Default channel"),
            channels.map((c) => h("option", { value: c.slug }, `${c.name} (${c.slug})`)))),
        h("div", {}, h("label", { for: "send-phone" }, "Phone (E.164)"),
          h("input", { id: "send-phone", name: "phone", placeholder: "+4915123456789", required: true }))),
      h("div", { id: "send-text" }, h("label", { for: "send-message" }, "Message"),
        h("textarea", { id: "send-message", name: "message" }, "Hello from the Switchboard console")),
      h("div", { id: "send-media", hidden: true }, h("div", { class: "row" },
        h("div", {}, h("label", { for: "media-type" }, "Media type"),
          h("select", { id: "media-type" }, ["image", "document", "audio", "video", "sticker"].map((t) => h("option", {}, t)))),
        h("div", {}, h("label", { for: "media-url" }, "Media URL (https)"), h("input", { id: "media-url" })),
        h("div", {}, h("label", { for: "media-caption" }, "Caption"), h("input", { id: "media-caption" })))),
      h("div", { id: "send-template", hidden: true }, h("div", { class: "row" },
        h("div", {}, h("label", { for: "tpl-name" }, "Template name"), h("input", { id: "tpl-name" })),
        h("div", {}, h("label", { for: "tpl-lang" }, "Language"), h("input", { id: "tpl-lang", value: "en_US" })))),
      h("label", { for: "send-ikey" }, "Idempotency-Key (the same key never sends twice)"),
      h("input", { id: "send-ikey", class: "mono", value: ikey() }),
      h("button", { type: "submit" }, "Send"));
    const type = form.querySelector("#send-type");
    type.addEventListener("change", () => {
      for (const t of ["text", "media", "template"]) form.querySelector("#send-" + t).hidden = type.value !== t;
    });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const v = (id) => form.querySelector("#" + id).value.trim();
      const body = { phone: v("send-phone") };
      if (v("send-channel")) body.channel_slug = v("send-channel");
      let path = "/messages";
      if (type.value === "text") body.message = v("send-message");
      if (type.value === "media") {
        path = "/messages/media";
        Object.assign(body, { media_type: v("media-type"), media_url: v("media-url") });
        if (v("media-caption")) body.caption = v("media-caption");
      }
      if (type.value === "template") {
        path = "/messages/template";
        body.template = { name: v("tpl-name"), language: { code: v("tpl-lang") }, components: [] };
      }
      try {
        const r = await api("POST", path, body, { "Idempotency-Key": v("send-ikey") });
        out.replaceChildren(h("div", { class: "card", id: "send-result" }, h("h2", {}, "Sent"),
          h("p", {}, "Message ", h("code", {}, r.message.uuid), " ", badge(r.message.status),
            " to contact ", h("code", {}, r.contact.uuid)),
          h("pre", {}, JSON.stringify(r, null, 2))));
        form.querySelector("#send-ikey").value = ikey();
      } catch (e) { out.replaceChildren(errorBox(e)); }
    });
    view.append(form, out);
  },

  messages(view) {
    view.append(h("h1", {}, "Messages"));
    const detail = h("div", {});
    // A step of the journey in words: what the API, the provider and the endpoints did.
    const describe = (s) => {
      switch (s.kind) {
        case "accepted": return "Accepted by the API";
        case "provider_request": return `Sent to ${s.provider || "the provider"}`;
        case "provider_response": return s.outcome === "accepted"
          ? `The provider accepted it (${s.provider_message_id})`
          : `The provider refused it (${s.provider_code !== undefined ? s.provider_code : s.code})`;
        case "status": return h("span", {}, "Status ", badge(s.status),
          s.provider_code !== undefined ? ` (provider code ${s.provider_code})` : "");
        case "webhook_attempt": return h("span", {}, `${s.event} to endpoint `, h("code", {}, s.endpoint_uuid || "—"),
          `, attempt ${s.attempt}: `, s.response_status !== null ? String(s.response_status) : (s.error_code || "no answer"),
          s.duration_ms !== null ? ` in ${s.duration_ms} ms` : "");
        default: return s.kind;
      }
    };
    async function open(m) {
      try {
        const full = await api("GET", `/messages/${m.uuid}`);
        detail.replaceChildren(h("div", { class: "card", id: "message-detail" },
          h("h2", {}, `${full.type} message `, badge(full.status)),
          h("p", { class: "muted" }, "Message ", h("code", {}, full.uuid), " · contact ", h("code", {}, full.contact_uuid)),
          h("h2", {}, "Journey"),
          h("ol", { class: "timeline" }, full.timeline.map((s) =>
            h("li", { "data-kind": s.kind }, h("time", { datetime: s.at }, whenPrecise(s.at)), " ", describe(s))))));
        detail.scrollIntoView({ block: "nearest" });
      } catch (e) { detail.replaceChildren(errorBox(e)); }
    }
    view.append(detail);
    pagedList(view, "/messages", [
      ["When", (m) => when(m.created_at)], ["Direction", (m) => m.direction], ["Type", (m) => m.type],
      ["Status", (m) => badge(m.status)], ["Channel", (m) => m.channel && m.channel.slug],
      ["Content", (m) => contentSummary(m)],
      ["Contact", (m) => h("code", {}, m.contact_uuid)],
    ], open, (apply) => {
      const status = h("select", { id: "msg-status", "aria-label": "Status" },
        ["", "queued", "sent", "delivered", "read", "failed", "received"].map((s) => h("option", { value: s }, s || "any status")));
      const direction = h("select", { id: "msg-direction", "aria-label": "Direction" },
        ["", "outbound", "inbound"].map((s) => h("option", { value: s }, s || "any direction")));
      const go = () => {
        const q = new URLSearchParams();
        if (status.value) q.set("status", status.value);
        if (direction.value) q.set("direction", direction.value);
        apply(q.toString());
      };
      status.addEventListener("change", go);
      direction.addEventListener("change", go);
      return h("div", { class: "toolbar" }, status, direction);
    });
  },

  async endpoints(view) {
    view.append(h("h1", {}, "Webhook endpoints"));
    let emitted = [];
    try {
      emitted = (await api("GET", "/webhook-events?limit=200")).data.filter((e) => e.emitted).map((e) => e.name);
    } catch (_) { /* the form still works */ }
    const notice = h("div", {});
    const create = h("form", { class: "card", id: "endpoint-form" },
      h("h2", {}, "New endpoint"),
      h("div", { class: "row" },
        h("div", {}, h("label", { for: "ep-name" }, "Name"), h("input", { id: "ep-name", placeholder: "CRM sync" })),
        h("div", {}, h("label", { for: "ep-url" }, "URL"), h("input", { id: "ep-url", required: true, placeholder: "https://example.com/hooks" })),
        h("div", {}, h("label", { for: "ep-events" }, "Events (comma-separated, * or ns.*)"), h("input", { id: "ep-events", value: "message.*" }))),
      h("button", { type: "submit" }, "Create endpoint"));
    const list = h("div", {});
    view.append(create, notice, list);
    const events = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);
    const showSecret = (title, secret) => notice.replaceChildren(h("div", { class: "card" },
      h("h2", {}, title), h("p", {}, "Store this signing secret now: it is not shown again."),
      h("div", { class: "secret", id: "shown-secret" }, secret)));
    create.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const body = { url: $("ep-url").value.trim(), events: events($("ep-events").value) };
      if ($("ep-name").value.trim()) body.name = $("ep-name").value.trim();
      try {
        const ep = await api("POST", "/webhook-endpoints", body);
        showSecret("Endpoint created", ep.signing_secret);
        refresh();
      } catch (e) { notice.replaceChildren(errorBox(e)); }
    });
    const act = async (what, fn) => {
      try { await fn(); toast(what); refresh(); } catch (e) { notice.replaceChildren(errorBox(e)); }
    };
    function actions(ep) {
      const testEvent = h("select", { "aria-label": "Test event" },
        ["integration.test"].concat(emitted.filter((n) => n !== "integration.test")).map((n) => h("option", {}, n)));
      const since = h("input", { type: "datetime-local", "aria-label": "Recover since" });
      return h("div", {},
        h("div", { class: "toolbar" }, testEvent,
          h("button", { class: "small", type: "button", onclick: () => act("Test event sent", () =>
            api("POST", `/webhook-endpoints/${ep.uuid}/test`, { event: testEvent.value })) }, "Send test"),
          h("button", { class: "small ghost", type: "button", onclick: () => act(ep.status === "active" ? "Disabled" : "Enabled", () =>
            api("PUT", `/webhook-endpoints/${ep.uuid}`, { status: ep.status === "active" ? "disabled" : "active" })) },
            ep.status === "active" ? "Disable" : "Enable"),
          h("button", { class: "small ghost", type: "button", onclick: async () => {
            try {
              const r = await api("POST", `/webhook-endpoints/${ep.uuid}/rotate-secret`, {});
              showSecret("Secret rotated (the old one signs too during the grace period)", r.signing_secret);
            } catch (e) { notice.replaceChildren(errorBox(e)); }
          } }, "Rotate secret"),
          h("button", { class: "small ghost", type: "button", onclick: () => {
            const url = prompt("URL", ep.url);
            if (url === null) return;
            const ev = prompt("Events (comma-separated)", ep.events.join(","));
            if (ev === null) return;
            act("Saved", () => api("PUT", `/webhook-endpoints/${ep.uuid}`, { url: url.trim(), events: events(ev) }));
          } }, "Edit"),
          h("button", { class: "small danger", type: "button", onclick: () => {
            if (confirm(`Delete ${ep.name}? It stops receiving at once.`)) act("Deleted", () => api("DELETE", `/webhook-endpoints/${ep.uuid}`));
          } }, "Delete")),
        h("div", { class: "toolbar" }, since,
          h("button", { class: "small ghost", type: "button", onclick: () => {
            if (!since.value) { toast("Choose a time to recover since"); return; }
            act("Recovery started", () => api("POST", `/webhook-endpoints/${ep.uuid}/recover`, { since: new Date(since.value).toISOString() }));
          } }, "Recover since")));
    }
    // The share of the last hour's settled deliveries that were delivered (pending and
    // retrying ones are counted apart), read from the ledger: at most 1 000 deliveries.
    async function health(ep) {
      const since = new Date(Date.now() - 3600 * 1000).toISOString();
      const counts = { delivered: 0, failed: 0, open: 0 };
      let cursor = null;
      for (let i = 0; i < 5; i++) {
        const q = new URLSearchParams({ endpoint_uuid: ep.uuid, since, limit: "200" });
        if (cursor) q.set("cursor", cursor);
        const page = await api("GET", "/webhook-deliveries?" + q.toString());
        for (const d of page.data) {
          if (d.status === "delivered") counts.delivered++;
          else if (d.status === "failed" || d.status === "retries_exhausted") counts.failed++;
          else counts.open++;
        }
        if (!page.has_more) break;
        cursor = page.next_cursor;
      }
      const settled = counts.delivered + counts.failed;
      const rate = settled ? Math.round((100 * counts.delivered) / settled) : null;
      return h("span", { class: "health " + (rate === null ? "" : rate >= 99 ? "ok" : rate >= 90 ? "warn" : "bad"),
        "data-rate": rate === null ? "" : String(rate) },
        rate === null ? "no deliveries settled in the last hour"
          : `${rate}% delivered in the last hour (${counts.delivered} of ${settled})`,
        counts.open ? `, ${counts.open} pending or retrying` : "");
    }
    // An endpoint's own time limit, retry delays and throttle, when it has any.
    const limits = (ep) => [ep.timeout ? `timeout ${ep.timeout}` : "",
      ep.retry_delays ? `retries after ${ep.retry_delays.join(", ")}` : "",
      ep.max_per_second ? `at most ${ep.max_per_second}/s` : ""].filter(Boolean).join(" · ");
    async function refresh() {
      try {
        const page = await api("GET", "/webhook-endpoints?limit=200");
        const rates = await Promise.all(page.data.map((ep) => health(ep).catch(() => "")));
        list.replaceChildren(page.data.length ? h("div", {}, page.data.map((ep, i) => h("div", { class: "card endpoint" },
          h("div", { class: "toolbar" },
            h("div", {}, h("strong", {}, ep.name), " ", badge(ep.status), " ",
              h("span", { class: "muted endpoint-type" }, ep.type || "https"), " ",
              h("span", { class: "muted" }, `ordering: ${ep.ordering}`),
              " · ", rates[i]),
            h("code", {}, ep.url)),
          h("p", { class: "muted" }, "Events: ", ep.events.join(", "), ep.disabled_reason ? ` — ${ep.disabled_reason}` : ""),
          // A broker's target (credentials masked by the API), the filter and the overrides.
          ep.target ? h("p", { class: "muted endpoint-target" }, "Target: ",
            h("code", {}, Object.entries(ep.target).map(([k, v]) => `${k}: ${v}`).join(" · "))) : "",
          ep.filter ? h("p", { class: "muted endpoint-filter" }, "Filter: ", h("code", {}, JSON.stringify(ep.filter))) : "",
          limits(ep) ? h("p", { class: "muted endpoint-limits" }, limits(ep)) : "",
          // How deliveries authenticate (no secret is ever answered).
          ep.auth ? h("p", { class: "muted endpoint-auth" }, "Authentication: ",
            ep.auth.type === "mtls" ? h("code", {}, `mTLS client certificate sha256 ${ep.auth.certificate_sha256}`)
              : h("code", {}, `OAuth2 client ${ep.auth.client_id} at ${ep.auth.token_url}`)) : "",
          (ep.warnings || []).map((w) => h("p", { class: "error" }, w.message || w.code || String(w))),
          actions(ep))))
          : h("p", { class: "empty" }, "No endpoints yet. Create one above; on a demo server a local URL such as http://127.0.0.1:9911/hooks works."));
      } catch (e) { list.replaceChildren(errorBox(e)); }
    }
    refresh();
  },

  async deliveries(view) {
    view.append(h("h1", {}, "Delivery ledger"));
    const detail = h("div", {});
    // Endpoints by uuid: the ledger names them, the filter offers them.
    let endpoints = [];
    try { endpoints = (await api("GET", "/webhook-endpoints?limit=200")).data; } catch (_) { /* uuids then */ }
    const byUuid = new Map(endpoints.map((ep) => [ep.uuid, ep]));
    const endpointName = (uuid) => (byUuid.has(uuid) ? byUuid.get(uuid).name : uuid || "");
    let listing;
    // The request of the last attempt as the receiver got it: the body is the stored envelope
    // (byte for byte); signatures and the endpoint's own header values are masked.
    function requestHeaders(full) {
      const last = (full.attempt_log || [])[full.attempt_log.length - 1];
      const rows = [["Content-Type", "application/json"], ["X-Switchboard-Event", full.event],
        ["X-Switchboard-Delivery", full.delivery_id], ["X-Switchboard-Attempt", String(last ? last.number : 1)]];
      if (full.sequence) rows.push(["X-Switchboard-Sequence", String(full.sequence)]);
      const ep = byUuid.get(full.endpoint_uuid);
      for (const name of Object.keys((ep && ep.headers) || {})) rows.push([name, "•••• (set on the endpoint)"]);
      if (!last || last.signed_with) {
        const ids = last && last.signed_with ? ` (signed with ${last.signed_with.join(", ")})` : "";
        rows.push(["webhook-id", full.delivery_id], ["webhook-timestamp", "the attempt's time, in seconds"],
          ["webhook-signature", "v1,••••" + ids], ["X-Switchboard-Signature", "v1=••••" + ids]);
      }
      rows.push(["traceparent", "the message's trace"]);
      return rows;
    }
    async function open(d) {
      try {
        const full = await api("GET", `/webhook-deliveries/${d.delivery_id}`);
        detail.replaceChildren(h("div", { class: "card", id: "delivery-detail" },
          h("h2", {}, `${full.event} `, badge(full.status)),
          h("p", { class: "muted" }, "Delivery ", h("code", {}, full.delivery_id), " · event ", h("code", {}, full.event_id),
            " · endpoint ", h("strong", {}, endpointName(full.endpoint_uuid)),
            ` · trigger ${full.trigger}`, full.sequence ? ` · sequence ${full.sequence}` : ""),
          h("h2", {}, "Attempts"),
          table([
            ["#", (a) => a.number], ["At", (a) => when(a.started_at)],
            ["Answer", (a) => (a.response_status !== null ? a.response_status : a.error_code || "—")],
            ["Duration", (a) => (a.duration_ms !== null ? `${a.duration_ms} ms` : "—")],
            ["Response", (a) => h("code", {}, a.response_body_excerpt || a.error_message || "")],
          ], full.attempt_log || []),
          h("h2", {}, "Request headers"),
          h("div", { id: "delivery-headers" }, table([["Header", (r) => h("code", {}, r[0])], ["Value", (r) => r[1]]], requestHeaders(full))),
          h("h2", {}, "Payload"),
          h("pre", { id: "delivery-payload" }, JSON.stringify(full.payload, null, 2)),
          h("button", { type: "button", id: "retry", disabled: full.status === "pending", onclick: async () => {
            try { await api("POST", `/webhook-deliveries/${full.delivery_id}/retry`, {}); toast("Redelivery queued"); listing.reload(); open(full); }
            catch (e) { detail.append(errorBox(e)); }
          } }, "Retry")));
        detail.scrollIntoView({ block: "nearest" });
      } catch (e) { detail.replaceChildren(errorBox(e)); }
    }
    listing = pagedList(view, "/webhook-deliveries", [
      ["Created", (d) => when(d.created_at)], ["Event", (d) => d.event], ["Status", (d) => badge(d.status)],
      ["Attempts", (d) => d.attempts], ["Answer", (d) => d.response_status || d.error_code || "—"],
      ["Trigger", (d) => d.trigger], ["Endpoint", (d) => endpointName(d.endpoint_uuid)],
    ], open, (apply) => {
      const status = h("select", { id: "delivery-status", "aria-label": "Status" },
        ["", "pending", "retrying", "delivered", "failed", "retries_exhausted"].map((s) => h("option", { value: s }, s || "any status")));
      const event = h("input", { id: "delivery-event", "aria-label": "Event", placeholder: "event or namespace.*" });
      const endpoint = h("select", { id: "delivery-endpoint", "aria-label": "Endpoint" },
        [h("option", { value: "" }, "any endpoint")].concat(endpoints.map((ep) => h("option", { value: ep.uuid }, ep.name))));
      const since = h("input", { id: "delivery-since", type: "datetime-local", "aria-label": "Since" });
      const go = () => {
        const q = new URLSearchParams();
        if (status.value) q.set("status", status.value);
        if (event.value.trim()) q.set("event", event.value.trim());
        if (endpoint.value) q.set("endpoint_uuid", endpoint.value);
        if (since.value) q.set("since", new Date(since.value).toISOString());
        apply(q.toString());
      };
      for (const el of [status, endpoint, since]) el.addEventListener("change", go);
      event.addEventListener("change", go);
      return h("div", { class: "toolbar" }, status, event, endpoint, since,
        h("button", { class: "ghost", type: "button", onclick: () => listing.reload() }, "Refresh"));
    });
    view.append(detail);
  },

  events(view) {
    view.append(h("h1", {}, "Event log"));
    pagedList(view, "/events", [
      ["When", (e) => when(e.occurred_at || e.created_at)], ["Type", (e) => e.type], ["Category", (e) => e.category],
      ["Actor", (e) => (e.actor ? e.actor.type : "")], ["Subject", (e) => (e.subject ? `${e.subject.type} ${e.subject.id || ""}` : "")],
    ]);
  },

  async catalogue(view) {
    view.append(h("h1", {}, "Event catalogue"));
    const holder = h("div", {});
    view.append(h("p", { class: "muted" }, "Events an endpoint can subscribe to. Only those marked emitted are ever sent by this deployment."), holder);
    try {
      const page = await api("GET", "/webhook-events?limit=200");
      holder.append(table([
        ["Event", (e) => h("code", {}, e.name)], ["Emitted", (e) => (e.emitted ? badge("emitted") : "")],
        ["Description", (e) => e.description],
      ], page.data.sort((a, b) => Number(b.emitted) - Number(a.emitted))));
    } catch (e) { holder.append(errorBox(e)); }
  },
};

async function show() {
  const signedIn = !!sessionStorage.getItem(KEY);
  $("signin").hidden = signedIn;
  $("nav").hidden = !signedIn;
  $("signout").hidden = !signedIn;
  const view = $("view");
  view.hidden = !signedIn;
  if (!signedIn) { $("key").focus(); return; }
  const name = (location.hash || "#channels").slice(1);
  const render = views[name] || views.channels;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  view.replaceChildren();
  view.dataset.view = name;
  await render(view);
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = $("key").value.trim();
    sessionStorage.setItem(KEY, key);
    try {
      await api("GET", "/permissions");
      $("key").value = "";
      $("signin-error").hidden = true;
      show();
    } catch (e) {
      if (e.status === 401) {
        sessionStorage.removeItem(KEY);
        $("signin-error").textContent = `${e.code}: the key was not accepted.`;
        $("signin-error").hidden = false;
      } else { show(); }
    }
  });
  $("signout").addEventListener("click", () => { sessionStorage.removeItem(KEY); location.hash = ""; show(); });
  window.addEventListener("hashchange", show);
  show();
});
