#!/usr/bin/env node
// Drives a broker with the unmodified amqplib client (npm) and prints what it saw as JSON.
//
//   node interop.js <scenario> <amqp-url> <name> [args...]
//
// Each scenario prints one JSON object per line on stdout and exits 0 when the
// client-side calls worked; broker behaviour is reported in the JSON and judged by
// tests/interop/test_node.py, which runs the same scenario against Leveret and RabbitMQ.
'use strict';

const amqp = require('amqplib');

const WAIT_MS = 5000;

function emit(result) {
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

function fail(message) {
  process.stderr.write(`interop.js: ${message}\n`);
  process.exit(2);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Resolves with the promise's value, or fails the scenario after WAIT_MS.
function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// A queue of deliveries for a consumer, read one at a time.
function inbox() {
  const items = [];
  const waiters = [];
  return {
    push(item) {
      const waiter = waiters.shift();
      if (waiter) waiter(item);
      else items.push(item);
    },
    next(what = 'a delivery') {
      if (items.length) return Promise.resolve(items.shift());
      return within(new Promise((resolve) => waiters.push(resolve)), what);
    },
    pending() {
      return items.length;
    },
  };
}

function errInfo(err) {
  if (!err) return null;
  return {
    code: err.code ?? null,
    classId: err.classId ?? null,
    methodId: err.methodId ?? null,
    message: err.message,
  };
}

// receive_logs.js from the tutorial: a fanout exchange, a server-named exclusive queue
// bound to it, a noAck consumer. Prints a "ready" line, then the messages once it has
// `count` of them.
async function receiveLogs(url, exchange, count) {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  await channel.assertExchange(exchange, 'fanout', { durable: false });
  const q = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(q.queue, exchange, '');
  const bodies = [];
  let redelivered = 0;
  const done = new Promise((resolve) => {
    channel.consume(
      q.queue,
      (msg) => {
        bodies.push(msg.content.toString());
        if (msg.fields.redelivered) redelivered += 1;
        if (bodies.length === count) resolve();
      },
      { noAck: true },
    );
  });
  emit({ ready: true, queue: q.queue });
  await within(done, `${count} messages`);
  emit({ queue: q.queue, messages: bodies, redelivered });
  await connection.close();
}

// emit_log.js from the tutorial, publishing each argument in turn.
async function emitLog(url, exchange, bodies) {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  await channel.assertExchange(exchange, 'fanout', { durable: false });
  for (const body of bodies) channel.publish(exchange, '', Buffer.from(body));
  // Closing the channel flushes what was published before the connection goes.
  await channel.close();
  await connection.close();
  emit({ sent: bodies.length });
}

async function deleteExchange(url, exchange) {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  await channel.deleteExchange(exchange);
  await connection.close();
  emit({ deleted: exchange });
}

async function connectionInfo(url) {
  const connection = await amqp.connect(url);
  const c = connection.connection;
  const { capabilities, ...properties } = c.serverProperties;
  emit({
    channelMax: c.channelMax,
    frameMax: c.frameMax,
    heartbeat: c.heartbeat,
    // Field tables keep their wire order in a JavaScript object.
    propertyOrder: Object.keys(c.serverProperties),
    capabilityOrder: Object.keys(capabilities),
    properties,
    capabilities,
  });
  await connection.close();
}

// Publishes on a confirm channel and waits for every ack.
async function confirms(url, name) {
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  const queue = `${name}-confirms`;
  const declared = await channel.assertQueue(queue, { durable: false });
  const fanout = `${name}-nowhere`;
  await channel.assertExchange(fanout, 'fanout', { durable: false });
  const outcomes = [];
  for (let i = 0; i < 20; i += 1) {
    channel.sendToQueue(queue, Buffer.from(String(i)), {}, (err) => outcomes.push(err === null));
  }
  channel.publish(fanout, '', Buffer.from('unroutable'), {}, (err) =>
    outcomes.push(err === null),
  );
  await within(channel.waitForConfirms(), 'waitForConfirms');
  const checked = await channel.checkQueue(queue);
  await channel.deleteQueue(queue);
  await channel.deleteExchange(fanout);
  await connection.close();
  emit({
    declared: { queue: declared.queue, messageCount: declared.messageCount,
      consumerCount: declared.consumerCount },
    outcomes,
    messageCount: checked.messageCount,
  });
}

// mandatory=true with no route: the message comes back as basic.return, then is acked.
async function mandatory(url, name) {
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  const exchange = `${name}-unbound`;
  await channel.assertExchange(exchange, 'direct', { durable: false });
  const returns = inbox();
  // The order in which returns and confirms reach the client.
  const order = [];
  channel.on('return', (msg) => {
    order.push(`return:${msg.content.toString()}`);
    returns.push(msg);
  });
  const acks = [];
  channel.publish(exchange, 'nobody', Buffer.from('lost'),
    { mandatory: true, correlationId: 'c-1', headers: { k: 'v' } },
    (err) => {
      order.push('confirm');
      acks.push(err === null);
    });
  channel.sendToQueue(`${name}-no-such-queue`, Buffer.from('lost too'), { mandatory: true },
    (err) => {
      order.push('confirm');
      acks.push(err === null);
    });
  channel.sendToQueue(`${name}-no-such-queue`, Buffer.from('dropped'), {},
    (err) => {
      order.push('confirm');
      acks.push(err === null);
    });
  await within(channel.waitForConfirms(), 'waitForConfirms');
  const seen = [];
  for (let i = 0; i < 2; i += 1) {
    const msg = await returns.next('basic.return');
    seen.push({
      replyCode: msg.fields.replyCode,
      replyText: msg.fields.replyText,
      exchange: msg.fields.exchange,
      routingKey: msg.fields.routingKey,
      body: msg.content.toString(),
      correlationId: msg.properties.correlationId ?? null,
      headers: msg.properties.headers ?? null,
    });
  }
  await sleep(200);
  await channel.deleteExchange(exchange);
  await connection.close();
  emit({ returns: seen, acks, order, extraReturns: returns.pending() });
}

// Channel errors: a publish to a missing exchange closes the channel with 404.
async function channelError(url, name) {
  const connection = await amqp.connect(url);
  let connectionError = null;
  connection.on('error', (err) => {
    connectionError = err;
  });
  const missing = `${name}-missing`;

  const channel = await connection.createChannel();
  const errored = new Promise((resolve) => channel.on('error', resolve));
  const closed = new Promise((resolve) => channel.on('close', () => resolve(true)));
  channel.publish(missing, 'k', Buffer.from('x'));
  const publishError = await within(errored, "the channel's error event");
  const channelClosed = await within(closed, "the channel's close event");

  const passive = await connection.createChannel();
  passive.on('error', () => {});
  const exchangePassive = await passive.checkExchange(missing).then(() => null, errInfo);
  const queueChannel = await connection.createChannel();
  queueChannel.on('error', () => {});
  const queuePassive = await queueChannel.checkQueue(missing).then(() => null, errInfo);

  // The connection survives: a fresh channel still works.
  const ok = await connection.createChannel();
  const q = await ok.assertQueue('', { exclusive: true });
  await connection.close();
  emit({
    publish: errInfo(publishError),
    channelClosed,
    exchangePassive,
    queuePassive,
    connectionError: errInfo(connectionError),
    afterwards: q.queue.startsWith('amq.gen-'),
  });
}

// prefetch(1) with manual acks; the first delivery is nacked with requeue.
async function qos(url, name) {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  const queue = `${name}-qos`;
  await channel.assertQueue(queue, { durable: false });
  for (const body of ['m0', 'm1', 'm2']) channel.sendToQueue(queue, Buffer.from(body));
  await channel.prefetch(1);
  const deliveries = inbox();
  const consumed = await channel.consume(queue, (msg) => deliveries.push(msg), { noAck: false });
  const log = [];
  const record = (msg) =>
    log.push({ body: msg.content.toString(), tag: msg.fields.deliveryTag,
      redelivered: msg.fields.redelivered });
  const first = await deliveries.next();
  record(first);
  await sleep(300);
  const early = deliveries.pending();
  const whileUnacked = await channel.checkQueue(queue);
  channel.nack(first, false, true);
  for (let i = 0; i < 3; i += 1) {
    const msg = await deliveries.next();
    record(msg);
    channel.ack(msg);
  }
  const after = await channel.checkQueue(queue);
  await channel.cancel(consumed.consumerTag);
  await channel.deleteQueue(queue);
  await connection.close();
  emit({
    deliveries: log,
    early,
    readyWhileUnacked: whileUnacked.messageCount,
    consumers: after.consumerCount,
    readyAfter: after.messageCount,
  });
}

// A consumer sees null when its queue is deleted from another connection.
async function cancelNotify(url, name) {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  const queue = `${name}-cancel`;
  await channel.assertQueue(queue, { durable: false });
  channel.sendToQueue(queue, Buffer.from('one'));
  const deliveries = inbox();
  const tag = `ctag-${name}`;
  await channel.consume(queue, (msg) => deliveries.push(msg), { consumerTag: tag });
  const first = await deliveries.next();
  const other = await amqp.connect(url);
  const otherChannel = await other.createChannel();
  const deleted = await otherChannel.deleteQueue(queue);
  const cancelled = await deliveries.next('the cancel notification');
  const q = await channel.assertQueue('', { exclusive: true });
  await other.close();
  await connection.close();
  emit({
    first: first.content.toString(),
    deletedCount: deleted.messageCount,
    cancelled: cancelled === null,
    declaredAfter: q.queue.startsWith('amq.gen-'),
  });
}

async function main() {
  const [scenario, url, name, ...rest] = process.argv.slice(2);
  if (!name) fail('usage: node interop.js <scenario> <amqp-url> <name> [args...]');
  // A broker that never answers must not hang the test run.
  setTimeout(() => fail(`scenario ${scenario} timed out`), 30000).unref();
  const scenarios = {
    receive_logs: () => receiveLogs(url, name, Number.parseInt(rest[0], 10)),
    emit_log: () => emitLog(url, name, rest),
    delete_exchange: () => deleteExchange(url, name),
    connection: () => connectionInfo(url),
    confirms: () => confirms(url, name),
    mandatory: () => mandatory(url, name),
    channel_error: () => channelError(url, name),
    qos: () => qos(url, name),
    cancel_notify: () => cancelNotify(url, name),
  };
  const run = scenarios[scenario];
  if (!run) fail(`unknown scenario ${scenario}`);
  await run();
}

main().catch((err) => fail(err && err.stack ? err.stack : String(err)));
