'use strict'
// node bootstrap.js HOST:PORT
// Connects a kafkajs admin client, reads the cluster and topic metadata and
// prints them as JSON for tests/clients/test_bootstrap.py to check.
const { makeKafka, run } = require('./common')

run(async () => {
  const [broker] = process.argv.slice(2)
  const admin = makeKafka(broker, 'kcoord-kafkajs-bootstrap').admin()
  await admin.connect()
  try {
    const cluster = await admin.describeCluster()
    const names = await admin.listTopics()
    const { topics } = await admin.fetchTopicMetadata({ topics: names })
    return {
      cluster,
      topics: topics.map(t => ({ name: t.name, partitions: t.partitions.map(p => p.partitionId) })),
    }
  } finally {
    await admin.disconnect()
  }
})
