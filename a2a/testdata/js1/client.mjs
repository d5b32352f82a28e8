// Drives a meshtray A2A server with the official @a2a-js/sdk 1.3.0 client
// over A2A 1.0 (the SDK picks the 1.0 JSONRPC interface of the union card).
// Usage: node client.mjs BASE_URL TOKEN SEND_TEXT STREAM_TEXT
// Prints one JSON object: the card's interfaces, the SendMessage result,
// the SendStreamingMessage events in order and a GetTask of the sent task,
// states and roles by their 1.0 names. Any SDK error exits non-zero with
// the error on stderr.
import { randomUUID } from 'node:crypto';
import { Role, TaskState } from '@a2a-js/sdk';
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
// the card is public. The A2A-Version header the SDK sends is recorded.
const versions = [];
const authFetch = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('Authorization', `Bearer ${token}`);
  versions.push(headers.get('A2A-Version'));
  return fetch(input, { ...init, headers });
};

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: fetch }),
  }),
);

const message = (text) => ({
  messageId: randomUUID(),
  contextId: '',
  taskId: '',
  role: Role.ROLE_USER,
  parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});
const request = (text) => ({ tenant: '', message: message(text), configuration: undefined, metadata: undefined });
const state = (s) => TaskState[s.state];
const parts = (ps) => ps.map((p) => ({ kind: p.content?.$case, data: p.content?.$case === 'data' ? p.content.value : undefined }));

const client = await factory.createFromUrl(base);
const card = await client.getAgentCard();
const sent = await client.sendMessage(request(sendText));
const events = [];
for await (const ev of client.sendMessageStream(request(streamText))) {
  const p = ev.payload;
  const v = p.value;
  events.push({ kind: p.$case, state: v.status ? state(v.status) : undefined });
}
const got = await client.getTask({ tenant: '', id: sent.id, historyLength: 1 });
console.log(JSON.stringify({
  card: { name: card.name, interfaces: card.supportedInterfaces.map((i) => ({ url: i.url, protocolBinding: i.protocolBinding, protocolVersion: i.protocolVersion })) },
  versions,
  sent: { id: sent.id, state: state(sent.status), artifacts: (sent.artifacts || []).map((a) => parts(a.parts)) },
  events,
  got: { id: got.id, history: got.history.map((m) => Role[m.role]) },
}));
