// The application on kafkajs: ORDERS -> TOTALS, offsets committed after each total.
// env: BOOTSTRAP, GROUP, ORDERS, TOTALS, COUNT; prints how many it processed.
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const count = Number(process.env.COUNT)
  const kafka = new Kafka({ clientId: 'orders-kafkajs', brokers: process.env.BOOTSTRAP.split(','),
    logLevel: logLevel.NOTHING })
  const consumer = kafka.consumer({ groupId: process.env.GROUP })
  const producer = kafka.producer()
  await producer.connect()
  await consumer.connect()
  await consumer.subscribe({ topic: process.env.ORDERS, fromBeginning: true })
  let done = 0
  await new Promise((resolve, reject) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const o = JSON.parse(message.value.toString())
        const total = Math.round(o.qty * o.price * 100) / 100
        await producer.send({ topic: process.env.TOTALS,
          messages: [{ key: message.key, value: JSON.stringify({ id: o.id, total }) }] })
        await consumer.commitOffsets([{ topic, partition,
          offset: (BigInt(message.offset) + 1n).toString() }])
        done += 1
        if (done >= count) resolve()
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  await producer.disconnect()
  console.log(done)
}

main().catch(err => { console.error(err); process.exit(1) })
