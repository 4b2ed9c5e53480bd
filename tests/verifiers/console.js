// Drives the console in Debian's headless Chromium (playwright-core, no downloaded browser):
// sign in, create an endpoint, send a message, find its delivery in the ledger with its
// attempt, retry it; screenshots at each step. Prints one JSON line of measurements.
//
//   node console.js BASE_URL API_KEY RECEIVER_URL OUT_DIR
"use strict";
const { chromium } = require("playwright-core");
const path = require("path");

const [base, key, receiver, out] = process.argv.slice(2);
const shot = (page, name) => page.screenshot({ path: path.join(out, name + ".png"), fullPage: true });

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const requested = [];
  const consoleErrors = [];
  page.on("request", (r) => requested.push(r.url()));
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));

  await page.goto(base + "/console", { waitUntil: "load" });
  await page.waitForFunction(() => performance.getEntriesByType("paint").length > 0, null, { timeout: 5000 })
    .catch(() => {});
  const timing = await page.evaluate(() => {
    const paint = performance.getEntriesByType("paint").find((p) => p.name === "first-contentful-paint")
      || performance.getEntriesByType("paint")[0];
    const nav = performance.getEntriesByType("navigation")[0];
    const resources = performance.getEntriesByType("resource");
    const bytes = (nav ? nav.transferSize : 0) + resources.reduce((n, r) => n + (r.transferSize || 0), 0);
    const body = (nav ? nav.encodedBodySize : 0) + resources.reduce((n, r) => n + (r.encodedBodySize || 0), 0);
    return { first_paint_ms: paint ? paint.startTime : null, transfer_bytes: bytes, body_bytes: body };
  });
  await shot(page, "1-sign-in");
  // Signed out, only the sign-in form shows: no navigation.
  const navSignedOut = await page.isVisible("nav");

  // Sign in with the keyboard.
  await page.focus("#key");
  await page.keyboard.type(key);
  await page.keyboard.press("Enter");
  await page.waitForSelector("nav:not([hidden])");
  await page.waitForSelector("table");
  await shot(page, "2-channels");

  // Create an endpoint; its secret is shown once.
  await page.click('nav a[data-view="endpoints"]');
  await page.fill("#ep-name", "Browser test");
  await page.fill("#ep-url", receiver);
  await page.fill("#ep-events", "message.*");
  await page.click('#endpoint-form button[type="submit"]');
  const secret = await page.textContent("#shown-secret");
  if (!/^whsec_/.test(secret)) throw new Error("no secret shown: " + secret);
  await page.waitForSelector(".endpoint");
  await shot(page, "3-endpoint-created");

  // Send a message.
  await page.click('nav a[data-view="send"]');
  await page.fill("#send-phone", "+4915123456789");
  await page.fill("#send-message", "Sent from the console test");
  await page.click('#send-form button[type="submit"]');
  await page.waitForSelector("#send-result, #view .error");
  if (!(await page.locator("#send-result").count())) throw new Error("the send failed: " + await page.textContent("#view .error"));
  await shot(page, "4-sent");

  // The delivery in the ledger, delivered, with its attempt; then retry it.
  await page.click('nav a[data-view="deliveries"]');
  let delivered = false;
  for (let i = 0; i < 100 && !delivered; i++) {
    await page.waitForSelector("table, .empty");
    delivered = await page.locator("tr.clickable", { hasText: "message.sent" }).filter({ hasText: "delivered" }).count() > 0;
    if (!delivered) {
      await page.waitForTimeout(200);
      await page.click('button:has-text("Refresh")');
    }
  }
  if (!delivered) throw new Error("the delivery never showed as delivered");
  // The endpoint's health at a glance: its success rate over the last hour.
  await page.click('nav a[data-view="endpoints"]');
  await page.waitForSelector(".endpoint .health");
  const health = await page.textContent(".endpoint .health");
  await shot(page, "5b-endpoint-health");
  // The card shows the endpoint's type, filter and own limits (set here through the API).
  const auth = { authorization: "Bearer " + key };
  const listed = await (await fetch(base + "/api/v1/integrations/webhook-endpoints", { headers: auth })).json();
  const mine = listed.data.find((e) => e.name === "Browser test");
  const put = await fetch(base + "/api/v1/integrations/webhook-endpoints/" + mine.uuid, {
    method: "PUT", headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ filter: { "channel.type": { $in: ["sandbox"] } }, timeout: "5s", max_per_second: 50 }),
  });
  if (!put.ok) throw new Error("PUT of the endpoint's controls: " + put.status);
  await page.click('nav a[data-view="deliveries"]');
  await page.click('nav a[data-view="endpoints"]');
  await page.waitForSelector(".endpoint .endpoint-filter");
  const card = {
    type: await page.textContent(".endpoint .endpoint-type"),
    filter: await page.textContent(".endpoint .endpoint-filter"),
    limits: await page.textContent(".endpoint .endpoint-limits"),
  };
  await shot(page, "5c-endpoint-controls");
  await page.click('nav a[data-view="deliveries"]');
  await page.waitForSelector("tr.clickable");
  // The ledger names the endpoint; its filters narrow it by event, endpoint and time.
  const ledgerEndpoint = await page.locator("tr.clickable", { hasText: "message.sent" }).first().textContent();
  await page.fill("#delivery-event", "contact.*");
  await page.press("#delivery-event", "Enter");
  await page.waitForSelector("#view .empty");
  const rowsOtherEvent = await page.locator("tr.clickable").count();
  await page.fill("#delivery-event", "message.sent");
  await page.press("#delivery-event", "Enter");
  await page.waitForSelector("tr.clickable");
  await page.selectOption("#delivery-endpoint", { label: "Browser test" });
  await page.waitForSelector("tr.clickable");
  const rowsOfEndpoint = await page.locator("tr.clickable").count();
  await page.fill("#delivery-since", "2999-01-01T00:00");
  await page.dispatchEvent("#delivery-since", "change");
  await page.waitForSelector("#view .empty");
  const rowsInFuture = await page.locator("tr.clickable").count();
  await page.fill("#delivery-since", "");
  await page.dispatchEvent("#delivery-since", "change");
  await page.waitForSelector("tr.clickable");
  await shot(page, "5a-ledger-filtered");
  await page.locator("tr.clickable", { hasText: "message.sent" }).filter({ hasText: "delivered" }).first().click();
  await page.waitForSelector("#delivery-detail");
  const attempts = await page.locator("#delivery-detail > .table-wrap tbody tr").count();
  const firstAttempt = await page.textContent("#delivery-detail > .table-wrap tbody tr");
  const payload = JSON.parse(await page.textContent("#delivery-payload"));
  const headers = await page.textContent("#delivery-headers");
  await shot(page, "5-delivery");
  await page.click("#retry");
  await page.waitForSelector("#toast:not([hidden])");
  const toastText = await page.textContent("#toast");
  if (!/Redelivery queued/.test(toastText)) throw new Error("retry: " + toastText);
  await shot(page, "6-retried");

  // The message's journey: accepted, the provider, its status and the webhook attempts.
  await page.click('nav a[data-view="messages"]');
  await page.waitForSelector("tr.clickable");
  // Every kind has a one-line summary (the test sent a reply, a reaction, a location, contacts).
  const summaries = await page.$$eval("tr.clickable", (trs) => trs.map((tr) => tr.textContent));
  await page.locator("tr.clickable", { hasText: "Sent from the console test" }).first().click();
  await page.waitForSelector("#message-detail .timeline li");
  const journey = await page.$$eval("#message-detail .timeline li", (lis) => lis.map((li) => li.dataset.kind));
  await shot(page, "6b-journey");

  // A narrow screen still works.
  await page.setViewportSize({ width: 380, height: 800 });
  await page.click('nav a[data-view="messages"]');
  await page.waitForSelector("table");
  await shot(page, "7-narrow-messages");

  const keyInUrl = requested.some((u) => u.includes(key));
  const elsewhere = requested.filter((u) => !u.startsWith(base));
  console.log(JSON.stringify({
    ...timing, attempts, first_attempt: firstAttempt, journey, key_in_url: keyInUrl,
    other_origins: elsewhere, console_errors: consoleErrors, requests: requested.length,
    nav_visible_signed_out: navSignedOut, ledger_row: ledgerEndpoint, rows_other_event: rowsOtherEvent,
    rows_of_endpoint: rowsOfEndpoint, rows_in_future: rowsInFuture, payload, headers, health, card,
    summaries,
  }));
  await browser.close();
})().catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
