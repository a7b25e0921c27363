// Signs test deliveries as the providers sign them, checks each with the
// provider's own verifier, and prints them as JSON (vectors.json). The Go
// tests verify every vector with webhookd's verifier (signature) and post
// it through the gateway with the scheme's presets (gateway).
//
//   npm install && npm run gen
//
// (svix 2.5.0 and @shopify/shopify-api 15.0.0 ask for Node 22 and run on
// Node 20 as well.)
//
// Svix and Standard Webhooks sign with their own libraries. Shopify and
// Slack publish no signer: their HMACs are computed here as their docs
// describe, and @shopify/shopify-api's webhooks.validate and @slack/bolt's
// verifySlackRequest must accept them. Timestamps are the time of the run,
// since the verifiers check them against the clock; each vector says when
// it was signed ("at", Unix seconds).
import { createHmac } from 'node:crypto';
import { Webhook as Svix } from 'svix';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import '@shopify/shopify-api/adapters/web-api';
import { shopifyApi, LogSeverity, ApiVersion } from '@shopify/shopify-api';
import { verifySlackRequest } from '@slack/bolt';

const standardSecret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const shopifySecret = 'shopify app client secret';
const slackSecret = '8f742231b10e8888abcd99yyyzzz85a5';

const now = new Date(Math.floor(Date.now() / 1000) * 1000);
const at = now.getTime() / 1000;
const vectors = [];

function add(v) {
  vectors.push({ at, ...v });
}

// Svix, as it sends by default: the svix-* header names.
{
  const body = '{"type":"invoice.paid","data":{"id":"inv_1"}}';
  const id = 'msg_2mYtT0dGkNHQ1QBzGKJ0m5Vx6Yc';
  const wh = new Svix(standardSecret);
  const headers = { 'svix-id': id, 'svix-timestamp': String(at), 'svix-signature': wh.sign(id, now, body) };
  wh.verify(body, headers);
  add({ name: 'svix headers, signed by svix', scheme: 'standard-webhooks', secret: standardSecret, headers, body, request_id: id });
}

// Standard Webhooks, with its own library and header names.
{
  const body = '{"type":"user.created","data":{"id":"usr_1"}}';
  const id = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
  const wh = new StandardWebhook(standardSecret);
  const headers = { 'webhook-id': id, 'webhook-timestamp': String(at), 'webhook-signature': wh.sign(id, now, body) };
  wh.verify(body, headers);
  new Svix(standardSecret).verify(body, headers);
  add({ name: 'webhook-* headers, signed by standardwebhooks', scheme: 'standard-webhooks', secret: standardSecret, headers, body, request_id: id });
}

// Shopify: HMAC-SHA256 of the body, base64, keyed with the client secret.
const shopify = shopifyApi({
  apiKey: 'api key',
  apiSecretKey: shopifySecret,
  scopes: [],
  hostName: 'localhost',
  isEmbeddedApp: false,
  apiVersion: ApiVersion.October26,
  logger: { level: LogSeverity.Error },
});

async function shopifyVector(name, body, headers, requestID, deliveryID, webhookType) {
  const hmac = createHmac('sha256', shopifySecret).update(body, 'utf8').digest('base64');
  for (const h of ['X-Shopify-Hmac-Sha256', 'Shopify-Hmac-Sha256']) {
    if (h in headers) headers[h] = hmac;
  }
  const rawRequest = new Request('https://localhost/hooks/shopify', { method: 'POST', headers, body });
  const result = await shopify.webhooks.validate({ rawBody: body, rawRequest });
  if (!result.valid || result.webhookType !== webhookType) {
    throw new Error(`${name}: @shopify/shopify-api refused it: ${JSON.stringify(result)}`);
  }
  add({ name, scheme: 'shopify', secret: shopifySecret, headers, body, request_id: requestID, delivery_id: deliveryID });
}

await shopifyVector(
  'shopify webhook, X-Shopify-* headers',
  '{"id":820982911946154508,"updated_at":"2026-11-30T12:00:00-05:00"}',
  {
    'X-Shopify-Hmac-Sha256': '',
    'X-Shopify-Topic': 'orders/updated',
    'X-Shopify-Shop-Domain': 'example.myshopify.com',
    'X-Shopify-API-Version': '2026-10',
    'X-Shopify-Webhook-Id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
    'X-Shopify-Event-Id': '98880550-7158-44d4-b7cd-2c97c8a091b5',
    'X-Shopify-Triggered-At': '2026-11-30T17:00:00.000Z',
  },
  '98880550-7158-44d4-b7cd-2c97c8a091b5',
  'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
  'webhooks',
);
await shopifyVector(
  'shopify Events delivery, Shopify-* headers (as @shopify/shopify-api 15 validates them)',
  '{"topic":"Product","action":"update","handle":"product-prices","fields_changed":{"added":[],"updated":["product.variants.price"],"removed":[]}}',
  {
    'Shopify-Hmac-Sha256': '',
    'Shopify-Topic': 'Product',
    'Shopify-Shop-Domain': 'example.myshopify.com',
    'Shopify-Api-Version': 'unstable',
    'Shopify-Webhook-Id': '5f1c7b2e-8a43-4c1e-9d6a-0b2f3c4d5e6f',
    'Shopify-Handle': 'product-prices',
    'Shopify-Action': 'update',
    'Shopify-Triggered-At': '2026-11-30T17:00:00.000Z',
  },
  '5f1c7b2e-8a43-4c1e-9d6a-0b2f3c4d5e6f',
  '5f1c7b2e-8a43-4c1e-9d6a-0b2f3c4d5e6f',
  'events',
);
await shopifyVector(
  'shopify Events delivery with an event ID (as @shopify/shopify-api 14 required)',
  '{"topic":"Product","action":"create","handle":"new-products","fields_changed":{"added":["product"],"updated":[],"removed":[]}}',
  {
    'Shopify-Hmac-Sha256': '',
    'Shopify-Topic': 'Product',
    'Shopify-Shop-Domain': 'example.myshopify.com',
    'Shopify-Api-Version': 'unstable',
    'Shopify-Webhook-Id': '0c9a7e1d-2b3f-4e5a-8c6d-7e8f9a0b1c2d',
    'Shopify-Event-Id': '7d3e2f1a-4b5c-4d6e-9f0a-1b2c3d4e5f60',
    'Shopify-Handle': 'new-products',
    'Shopify-Action': 'create',
  },
  '7d3e2f1a-4b5c-4d6e-9f0a-1b2c3d4e5f60',
  '0c9a7e1d-2b3f-4e5a-8c6d-7e8f9a0b1c2d',
  'events',
);

// Slack: v0=HMAC-SHA256 of "v0:{timestamp}:{body}", hex, keyed with the
// signing secret.
function slackVector(name, body, fields) {
  const signature = 'v0=' + createHmac('sha256', slackSecret).update(`v0:${at}:${body}`).digest('hex');
  verifySlackRequest({
    signingSecret: slackSecret,
    body,
    headers: { 'x-slack-signature': signature, 'x-slack-request-timestamp': at },
  });
  add({
    name,
    scheme: 'slack',
    secret: slackSecret,
    headers: { 'X-Slack-Signature': signature, 'X-Slack-Request-Timestamp': String(at) },
    body,
    ...fields,
  });
}

slackVector(
  'slack event_callback',
  '{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456","event":{"type":"app_mention","user":"U123ABC456","text":"hi","ts":"1515449522.000016","channel":"C123ABC456","event_ts":"1515449522000016"},"type":"event_callback","event_id":"Ev123ABC456","event_time":1515449522}',
  { request_id: 'Ev123ABC456' },
);
slackVector(
  'slack url_verification',
  '{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}',
  { challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P' },
);

console.log(JSON.stringify(vectors, null, 2));
