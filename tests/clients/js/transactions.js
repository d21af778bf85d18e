'use strict'
// node transactions.js BROKER TOPIC GROUP: one committed transaction (3 records
// and an offset commit of in-0 at 5 for GROUP), then one aborted transaction.
const { makeKafka, run } = require('./common')

run(async () => {
  const [broker, topic, group] = process.argv.slice(2)
  const kafka = makeKafka(broker, 'kcoord-txn')
  const producer = kafka.producer({ transactionalId: 'js-tx', idempotent: true,
                                    maxInFlightRequests: 1 })
  await producer.connect()
  const committed = await producer.transaction()
  await committed.send({ topic, messages: ['c0', 'c1', 'c2'].map(value => ({ value })) })
  await committed.sendOffsets({ consumerGroupId: group,
                                topics: [{ topic: 'in', partitions: [{ partition: 0, offset: '5' }] }] })
  await committed.commit()
  const aborted = await producer.transaction()
  await aborted.send({ topic, messages: ['a0', 'a1'].map(value => ({ value })) })
  await aborted.abort()
  await producer.disconnect()
  return { ok: true }
})
