'use strict'
// node secure_group.js SPEC.json
// SPEC: {broker, topic, group, n, ssl: null | {ca, cert?, key?}, sasl: null | {mechanism,
// username, password}} (ca/cert/key are file paths).  Produces n records, consumes them
// in the group, commits, and prints {values, committed} (the group's committed offset).
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')
const { run } = require('./common')

run(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
  let ssl = false
  if (spec.ssl) {
    ssl = { ca: [fs.readFileSync(spec.ssl.ca, 'utf8')], servername: 'localhost' }
    if (spec.ssl.cert) {
      ssl.cert = fs.readFileSync(spec.ssl.cert, 'utf8')
      ssl.key = fs.readFileSync(spec.ssl.key, 'utf8')
    }
  }
  const kafka = new Kafka({
    clientId: 'kcoord-secure', brokers: [spec.broker], ssl, sasl: spec.sasl || undefined,
    logLevel: logLevel.WARN, connectionTimeout: 10000, requestTimeout: 30000,
    retry: { retries: 5, initialRetryTime: 100 },
  })
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < spec.n; i++) messages.push({ value: `${spec.topic}-${i}` })
  await producer.send({ topic: spec.topic, messages, acks: -1 })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: spec.group, sessionTimeout: 30000 })
  await consumer.connect()
  await consumer.subscribe({ topic: spec.topic, fromBeginning: true })
  const values = []
  let last = -1
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out consuming')), 60000)
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        last = Number(message.offset)
        if (values.length >= spec.n) { clearTimeout(timer); resolve() }
      },
    })
  })
  await done
  await consumer.commitOffsets([{ topic: spec.topic, partition: 0, offset: String(last + 1) }])
  await consumer.disconnect()
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchOffsets({ groupId: spec.group, topics: [spec.topic] })
  await admin.disconnect()
  return { values, committed: Number(offsets[0].partitions[0].offset) }
})
