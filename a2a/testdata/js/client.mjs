// Drives a meshtray A2A server with the official @a2a-js/sdk 0.3.14 client.
// Usage: node client.mjs BASE_URL TOKEN SEND_TEXT STREAM_TEXT
// Prints one JSON object: the card, the message/send result, the
// message/stream events in order, and a tasks/get of the sent task.
// Any SDK error exits non-zero with the error on stderr.
import { randomUUID } from 'node:crypto';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';

const [base, token, sendText, streamText] = process.argv.slice(2);
if (!base || !token) {
  console.error('usage: node client.mjs BASE_URL TOKEN SEND_TEXT STREAM_TEXT');
  process.exit(2);
}

// The bearer grant goes in the Authorization header of JSON-RPC calls only;
// the card is public.
const authFetch = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: fetch }),
  }),
);

const message = (text) => ({
  kind: 'message',
  messageId: randomUUID(),
  role: 'user',
  parts: [{ kind: 'text', text }],
});

const client = await factory.createFromUrl(base);
const card = await client.getAgentCard();
const sent = await client.sendMessage({ message: message(sendText) });
const events = [];
for await (const ev of client.sendMessageStream({ message: message(streamText) })) {
  events.push(ev);
}
const got = await client.getTask({ id: sent.id, historyLength: 1 });
console.log(JSON.stringify({ card: { name: card.name, url: card.url, protocolVersion: card.protocolVersion }, sent, events, got }));
