// kafkajs against kcoord: run a list of offset / group operations, print one JSON
// line with their results.  Used by tests/clients/test_offsets_clients.py.
//
//   node offsets.js '{"brokers": ["127.0.0.1:9092"], "ops": [ ... ]}'
//
// ops:
//   {"op": "setOffsets", "groupId", "topic", "partitions": [{"partition", "offset"}]}
//       admin.setOffsets (needs JoinGroup/SyncGroup: it runs a consumer that seeks)
//   {"op": "commit", "groupId", "topic", "partitions": [{"partition", "offset", "metadata"}]}
//       OffsetCommit from kafkajs's own protocol layer for a simple group:
//       FindCoordinator, then broker.offsetCommit with generation -1 and no member
//       (what a consumer with manual assignment sends; kafkajs has no assign()).
//   {"op": "fetchOffsets", "groupId", "topics": [...]}   admin.fetchOffsets
//   {"op": "listGroups"}                                 admin.listGroups
//   {"op": "deleteGroups", "groupIds": [...]}           admin.deleteGroups
//   {"op": "describeGroups", "groupIds": [...]}         admin.describeGroups
// Each result is {"ok": value} or {"error": {"name", "message", "type"}}.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

function cluster(kafka) {
  // kafkajs keeps its Cluster factory behind a Symbol; the admin client has no
  // API that commits an offset for a simple group, so reach the protocol layer.
  const sym = Object.getOwnPropertySymbols(kafka)
    .find(s => s.description === 'private:Kafka:createCluster')
  return kafka[sym]({ allowAutoTopicCreation: false })
}

async function run(spec) {
  const kafka = new Kafka({
    clientId: 'kcoord-offsets-js',
    brokers: spec.brokers,
    logLevel: logLevel.NOTHING,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 1000 },
  })
  const admin = kafka.admin()
  await admin.connect()
  let raw = null
  const results = []
  try {
    for (const op of spec.ops) {
      try {
        let value
        switch (op.op) {
          case 'setOffsets':
            await admin.setOffsets({ groupId: op.groupId, topic: op.topic, partitions: op.partitions })
            value = true
            break
          case 'commit': {
            if (raw === null) {
              raw = cluster(kafka)
              await raw.connect()
            }
            const coordinator = await raw.findGroupCoordinator({ groupId: op.groupId })
            const resp = await coordinator.offsetCommit({
              groupId: op.groupId,
              groupGenerationId: -1,
              memberId: '',
              topics: [{
                topic: op.topic,
                partitions: op.partitions.map(p => ({
                  partition: p.partition, offset: String(p.offset), metadata: p.metadata ?? null,
                })),
              }],
            })
            value = resp.responses
            break
          }
          case 'fetchOffsets':
            value = await admin.fetchOffsets({ groupId: op.groupId, topics: op.topics })
            break
          case 'listGroups':
            value = await admin.listGroups()
            break
          case 'deleteGroups':
            value = await admin.deleteGroups(op.groupIds)
            break
          case 'describeGroups':
            value = await admin.describeGroups(op.groupIds)
            break
          default:
            throw new Error(`unknown op ${op.op}`)
        }
        results.push({ ok: value })
      } catch (e) {
        const error = { name: e.name, message: e.message, type: e.type }
        if (e.groups) error.groups = e.groups.map(g => ({ groupId: g.groupId, errorCode: g.errorCode }))
        results.push({ error })
      }
    }
  } finally {
    await admin.disconnect()
    if (raw !== null) await raw.disconnect()
  }
  return results
}

run(JSON.parse(process.argv[2]))
  .then(results => {
    process.stdout.write(JSON.stringify(results) + '\n')
    process.exit(0)
  })
  .catch(e => {
    process.stderr.write(`${e.stack || e}\n`)
    process.exit(1)
  })
