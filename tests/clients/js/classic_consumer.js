'use strict'
// One kafkajs group consumer for tests/clients/test_classic_groups.py.
//
//   node classic_consumer.js '{"bootstrap", "group", "topic", "name", "session_ms",
//                              "heartbeat_ms", "rebalance_ms"}'
//
// Writes one JSON line per event on stdout, stamped with CLOCK_MONOTONIC
// seconds (process.hrtime, the clock Python's time.monotonic reads):
//   assign  the GROUP_JOIN event's member assignment (kafkajs is eager: the
//           whole assignment of the new generation)
//   revoke  the start of ConsumerGroup.joinAndSync (a rejoin: kafkajs's fetch
//           loop has stopped and it gives up every partition) or of leave()
//   recs    records handed to eachBatch
//   commit  the COMMIT_OFFSETS event (emitted once the commit is acked);
//           autoCommit commits after every batch and on a rebalance error
//   client_restart  a CRASH event kafkajs restarts the consumer from (a
//           retriable error); it has stopped fetching (a revoke first)
//   closed  after disconnect()
// "stop" on stdin (or its end) disconnects: stop fetching, LeaveGroup.
const { Kafka, logLevel, PartitionAssigners } = require('kafkajs')
const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup')

const cfg = JSON.parse(process.argv[2])
const now = () => Number(process.hrtime.bigint()) / 1e9
const emit = event => process.stdout.write(JSON.stringify(event) + '\n')
const owned = new Set()

function revokeAll() {
  if (owned.size === 0) return
  const ps = [...owned].sort((a, b) => a - b)
  owned.clear()
  emit({ e: 'revoke', t: now(), ps })
}

// Instrument the two places where kafkajs gives up its partitions.
for (const method of ['joinAndSync', 'leave']) {
  const original = ConsumerGroup.prototype[method]
  if (typeof original !== 'function') throw new Error(`kafkajs internals changed: no ${method}`)
  ConsumerGroup.prototype[method] = function (...args) {
    revokeAll()
    return original.apply(this, args)
  }
}

const kafka = new Kafka({
  clientId: cfg.name,
  brokers: [cfg.bootstrap],
  connectionTimeout: 10000,
  requestTimeout: 30000,
  retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 2000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, level, label, log }) => {
    process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`)
  },
})

const consumer = kafka.consumer({
  groupId: cfg.group,
  sessionTimeout: cfg.session_ms,
  heartbeatInterval: cfg.heartbeat_ms,
  rebalanceTimeout: cfg.rebalance_ms,
  partitionAssigners: [PartitionAssigners.roundRobin],
  maxWaitTimeInMs: 100,
  retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 2000 },
})

consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  const ps = (payload.memberAssignment[cfg.topic] || []).slice().sort((a, b) => a - b)
  revokeAll() // never the case: joinAndSync revoked already
  for (const p of ps) owned.add(p)
  emit({ e: 'assign', t: now(), ps, generation_leader: payload.isLeader })
})
consumer.on(consumer.events.COMMIT_OFFSETS, ({ payload }) => {
  const c = {}
  for (const t of payload.topics) {
    if (t.topic !== cfg.topic) continue
    for (const p of t.partitions) c[p.partition] = Number(p.offset)
  }
  emit({ e: 'commit', t: now(), c })
})
consumer.on(consumer.events.CRASH, ({ payload }) => {
  const err = `crash: ${payload.error && payload.error.message}`
  if (payload.restart) {
    // a retriable error (the broker gone while it restarts): kafkajs stops
    // fetching and runs the consumer again, rejoining the group
    revokeAll()
    emit({ e: 'client_restart', t: now(), err })
  } else {
    emit({ e: 'error', t: now(), err })
  }
})

let stopping = null
function stop() {
  if (stopping) return stopping
  stopping = (async () => {
    await consumer.disconnect()
    revokeAll()
    emit({ e: 'closed', t: now() })
    process.exit(0)
  })().catch(e => {
    emit({ e: 'error', t: now(), err: `disconnect: ${e.stack || e}` })
    process.exit(1)
  })
  return stopping
}

process.stdin.setEncoding('utf8')
let input = ''
process.stdin.on('data', chunk => {
  input += chunk
  if (input.split('\n').some(line => line.trim() === 'stop')) stop()
})
process.stdin.on('end', stop)

async function main() {
  await consumer.connect()
  await consumer.subscribe({ topic: cfg.topic, fromBeginning: true })
  emit({ e: 'started', t: now() })
  await consumer.run({
    autoCommit: true,
    eachBatchAutoResolve: true,
    eachBatch: async ({ batch }) => {
      if (batch.messages.length === 0) return
      emit({ e: 'recs', t: now(), r: batch.messages.map(m => [batch.partition, Number(m.offset)]) })
    },
  })
}

main().catch(e => {
  emit({ e: 'error', t: now(), err: `${e.stack || e}` })
  process.exit(1)
})
