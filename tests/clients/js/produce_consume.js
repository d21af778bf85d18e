'use strict'
// node produce_consume.js HOST:PORT TOPIC PARTITIONS COMPRESSION IN.json OUT.json
//
// Creates TOPIC with PARTITIONS partitions, produces the records of IN.json
// ([{p, k, v, h: [[name, value]]}], bytes base64) with acks=-1 and the given
// compression (none or gzip, the codecs kafkajs has built in), then reads
// every partition back from offset 0 and writes OUT.json:
//   {produced: {partition: [baseOffset...]}, partitions: {p: [{o, k, v, h}]}}
//
// kafkajs's consumer always joins a group (JoinGroup/SyncGroup); to read with
// manual partition assignment the script uses kafkajs's own cluster and
// broker classes (its Fetch request and record decoding), the same code its
// consumer runs once partitions are assigned.
const fs = require('fs')
const { CompressionTypes } = require('kafkajs')
const { makeKafka, run } = require('./common')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }
const CHUNK = 500 // records per send(): several batches per partition

function createCluster(kafka) {
  const sym = Object.getOwnPropertySymbols(kafka)
    .find(s => s.toString() === 'Symbol(private:Kafka:createCluster)')
  if (!sym) throw new Error('kafkajs internals changed: no createCluster')
  return kafka[sym]({ allowAutoTopicCreation: false })
}

function headersOf(h) {
  // distinct header names, so a plain object keeps them in order
  const out = {}
  for (const [name, value] of h) out[name] = Buffer.from(value, 'base64')
  return out
}

async function readAll(kafka, topic, partitions, deadlineMs) {
  const cluster = createCluster(kafka)
  await cluster.connect()
  try {
    await cluster.addTargetTopic(topic)
    await cluster.refreshMetadata()
    const offsets = await cluster.fetchTopicsOffset([
      { topic, partitions: [...Array(partitions).keys()].map(p => ({ partition: p, fromBeginning: false })) },
    ])
    const end = {}
    for (const p of offsets[0].partitions) end[p.partition] = BigInt(p.offset)
    const next = {}
    const out = {}
    for (let p = 0; p < partitions; p++) { next[p] = 0n; out[p] = [] }
    const deadline = Date.now() + deadlineMs
    while (Object.keys(next).some(p => next[p] < end[p])) {
      if (Date.now() > deadline) throw new Error(`read timed out at ${JSON.stringify(next, (k, v) => typeof v === 'bigint' ? v.toString() : v)}`)
      const pending = Object.keys(next).filter(p => next[p] < end[p]).map(Number)
      const byLeader = cluster.findLeaderForPartitions(topic, pending)
      for (const [leader, parts] of Object.entries(byLeader)) {
        const broker = await cluster.findBroker({ nodeId: leader })
        const response = await broker.fetch({
          replicaId: -1,
          isolationLevel: 1,
          maxWaitTime: 100,
          minBytes: 1,
          maxBytes: 10 * 1024 * 1024,
          topics: [{ topic, partitions: parts.map(p => ({ partition: p, fetchOffset: next[p].toString(), maxBytes: 1024 * 1024 })) }],
        })
        for (const t of response.responses) {
          for (const pd of t.partitions) {
            if (pd.errorCode !== 0) throw new Error(`fetch error ${pd.errorCode} on partition ${pd.partition}`)
            for (const m of pd.messages) {
              const o = BigInt(m.offset)
              if (o < next[pd.partition]) continue // a batch starting before fetchOffset
              out[pd.partition].push({
                o: m.offset,
                k: m.key ? m.key.toString('base64') : null,
                v: m.value ? m.value.toString('base64') : null,
                h: Object.entries(m.headers || {}).map(([name, value]) => [name, value.toString('base64')]),
              })
              next[pd.partition] = o + 1n
            }
          }
        }
      }
    }
    return out
  } finally {
    await cluster.disconnect()
  }
}

run(async () => {
  const [broker, topic, partitionsArg, compression, inFile, outFile] = process.argv.slice(2)
  const partitions = Number(partitionsArg)
  if (!(compression in CODECS)) throw new Error(`unknown compression ${compression}`)
  const records = JSON.parse(fs.readFileSync(inFile, 'utf8'))
  const kafka = makeKafka(broker, 'kcoord-kafkajs-produce-consume')

  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true })
  const meta = await admin.fetchTopicMetadata({ topics: [topic] })
  await admin.disconnect()

  const producer = kafka.producer({ allowAutoTopicCreation: false, maxInFlightRequests: 1 })
  await producer.connect()
  const produced = {}
  for (let i = 0; i < records.length; i += CHUNK) {
    const messages = records.slice(i, i + CHUNK).map(r => ({
      partition: r.p,
      key: Buffer.from(r.k, 'base64'),
      value: Buffer.from(r.v, 'base64'),
      headers: headersOf(r.h),
    }))
    const result = await producer.send({ topic, acks: -1, compression: CODECS[compression], messages })
    for (const r of result) {
      if (r.errorCode !== 0) throw new Error(`produce error ${r.errorCode} on partition ${r.partition}`)
      ;(produced[r.partition] = produced[r.partition] || []).push(r.baseOffset)
    }
  }
  await producer.disconnect()

  const partitionsOut = await readAll(kafka, topic, partitions, 120000)
  fs.writeFileSync(outFile, JSON.stringify({ created, produced, partitions: partitionsOut }))
  return {
    created,
    metadataPartitions: meta.topics[0].partitions.length,
    counts: Object.fromEntries(Object.entries(partitionsOut).map(([p, l]) => [p, l.length])),
  }
})
