// The official E2B JS SDK (debug mode) against dshd: `commands.run(cmd)`
// round trips over one Sandbox object (reused connections), for bench/dshd.lua.
// Usage: E2B_SANDBOX_URL=http://127.0.0.1:PORT node roundtrip.mjs RUNS WARMUP [CMD]
// Prints one JSON line: {"runs":N,"ms":[...]} (milliseconds per round trip).
import { Sandbox } from 'e2b'

const runs = Number(process.argv[2] || 200)
const warmup = Number(process.argv[3] || 20)
const cmd = process.argv[4] || '/bin/true'

const sbx = await Sandbox.connect('bench', { debug: true })
for (let i = 0; i < warmup; i++) await sbx.commands.run(cmd)
const ms = []
for (let i = 0; i < runs; i++) {
  const t0 = process.hrtime.bigint()
  const r = await sbx.commands.run(cmd)
  const t1 = process.hrtime.bigint()
  if (r.exitCode !== 0) throw new Error(`exit code ${r.exitCode}`)
  ms.push(Number(t1 - t0) / 1e6)
}
process.stdout.write(JSON.stringify({ runs, ms }) + '\n')
