'use strict'
// Shared by the kafkajs scripts the Python tests run with `node`.
const { Kafka, logLevel } = require('kafkajs')

function makeKafka(broker, clientId) {
  return new Kafka({
    clientId,
    brokers: [broker],
    logLevel: logLevel.WARN,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 5, initialRetryTime: 100 },
  })
}

// Run main(); print its result as one JSON line on stdout; exit non-zero on error.
function run(main) {
  main()
    .then(result => {
      process.stdout.write(JSON.stringify(result) + '\n')
      process.exit(0)
    })
    .catch(err => {
      process.stderr.write(`kafkajs script failed: ${err && err.stack ? err.stack : err}\n`)
      process.exit(1)
    })
}

module.exports = { makeKafka, run }
