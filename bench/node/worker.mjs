// The Node worker baselines for bench/code_runtime.lua, in one process:
// a fresh worker_threads Worker until its first message (what a Code Mode
// JavaScript run costs at the least), and one postMessage round trip between
// the main thread and a worker (what a binding call costs at the least).
// Usage: node worker.mjs STARTS CALLS
// Prints one JSON line: {"start":[ms...],"call":[ms...]}.
import { Worker } from 'node:worker_threads'

const starts = Number(process.argv[2] || 20)
const calls = Number(process.argv[3] || 2000)
const src = "const { parentPort } = require('node:worker_threads');" +
  "parentPort.postMessage(0); parentPort.on('message', (m) => parentPort.postMessage(m + 1));"

const once = (w) => new Promise((resolve) => w.once('message', resolve))

const start = []
for (let i = -3; i < starts; i++) {
  const t0 = process.hrtime.bigint()
  const w = new Worker(src, { eval: true })
  await once(w)
  if (i >= 0) start.push(Number(process.hrtime.bigint() - t0) / 1e6)
  await w.terminate()
}

const w = new Worker(src, { eval: true })
await once(w)
const call = []
for (let i = -100; i < calls; i++) {
  const t0 = process.hrtime.bigint()
  w.postMessage(i)
  await once(w)
  if (i >= 0) call.push(Number(process.hrtime.bigint() - t0) / 1e6)
}
await w.terminate()
process.stdout.write(JSON.stringify({ start, call }) + '\n')
