// Verifies one webhook request with the official Standard Webhooks library for Node.
// usage: node verify.js SECRET HEADERS_JSON BODY_FILE   (prints "verified", or exits 1)
const fs = require("fs");
const { Webhook } = require("standardwebhooks");

const [secret, headersFile, bodyFile] = process.argv.slice(2);
const headers = JSON.parse(fs.readFileSync(headersFile, "utf8"));
const body = fs.readFileSync(bodyFile, "utf8");
try {
  new Webhook(secret).verify(body, headers);
} catch (e) {
  console.log(`refused: ${e}`);
  process.exit(1);
}
console.log("verified");
