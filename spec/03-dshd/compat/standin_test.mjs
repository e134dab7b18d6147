// The official E2B JavaScript SDK (npm "e2b", pinned in package.json) in its
// normal mode against the E2B stand-in (spec/fixtures/e2b-api.mjs): the
// control plane at E2B_API_URL, envd at the URL the SDK derives from
// E2B_DOMAIN (https://49983-<id>.<domain>, the stand-in's TLS router, its
// certificate trusted through NODE_EXTRA_CA_CERTS). Run by
// spec/04-providers/53-e2b_official_sdk_spec.lua.
//
//   E2B_API_KEY=... E2B_API_URL=http://127.0.0.1:PORT E2B_DOMAIN=e2b.test:PORT \
//   NODE_EXTRA_CA_CERTS=cert.pem node standin_test.mjs RUN_ID
//
// The names of the stand-in's domain resolve to 127.0.0.1 in this process
// (as a DNS zone for it would): nothing leaves the machine. Debug mode is off
// (E2B_DEBUG and E2B_SANDBOX_URL must be unset). RUN_ID tags this run's
// sandboxes (metadata), so lists see only them.
// Output: one line per case ("ok   <name>" or "FAIL <name> - <error>"), then
// "REPORT <json>" with the passed and failed case names and the sandbox ids;
// exit 1 on any failure.
import assert from 'node:assert/strict'
import dns from 'node:dns'

const [RUN_ID] = process.argv.slice(2)
const DOMAIN = (process.env.E2B_DOMAIN || '').replace(/:\d+$/, '')
if (!RUN_ID || !DOMAIN || !process.env.E2B_API_URL || !process.env.E2B_API_KEY) {
  console.error('usage: E2B_API_KEY=.. E2B_API_URL=.. E2B_DOMAIN=<domain>:<port> node standin_test.mjs RUN_ID')
  process.exit(2)
}
if (process.env.E2B_DEBUG || process.env.E2B_SANDBOX_URL) {
  console.error('standin_test.mjs: E2B_DEBUG and E2B_SANDBOX_URL must be unset (the SDK runs in its normal mode)')
  process.exit(2)
}

// *.<domain> is the stand-in, on loopback
const lookup = dns.lookup
dns.lookup = function (host, options, cb) {
  if (typeof options === 'function') { cb = options; options = {} }
  if (typeof host === 'string' && (host === DOMAIN || host.endsWith(`.${DOMAIN}`))) {
    const all = typeof options === 'object' && options.all
    return process.nextTick(() => (all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4)))
  }
  return lookup.call(dns, host, options, cb)
}

const { Sandbox, ApiClient, ConnectionConfig, AuthenticationError, SandboxError, SandboxNotFoundError } =
  await import('e2b')

const passed = []
const failed = []
const ids = []
async function check(name, fn) {
  try {
    await fn()
    passed.push(name)
    console.log('ok   ', name)
  } catch (e) {
    failed.push(name)
    console.log('FAIL ', name, '-', e && (e.stack || e))
  }
}

const PORT = process.env.E2B_DOMAIN.match(/:(\d+)$/)[1]
const envdUrl = (id) => `https://49983-${id}.${DOMAIN}:${PORT}`
const mine = (role) => ({ suite: RUN_ID, role })

let a, b, auto

await check('Sandbox.create: POST /v2/sandboxes, envd at the derived URL with its token', async () => {
  a = await Sandbox.create('base', { timeoutMs: 60_000, metadata: mine('a'), envs: { FROM_CREATE: 'yes' } })
  ids.push(a.sandboxId)
  assert.match(a.sandboxId, /^[a-z0-9]{20}$/)
  assert.equal(a.envdApiUrl, envdUrl(a.sandboxId))
  assert.equal(typeof a.envdAccessToken, 'string')
  b = await Sandbox.create('base', { timeoutMs: 60_000, metadata: mine('b') })
  ids.push(b.sandboxId)
})

await check('commands through envd: output, envs from create, the user', async () => {
  const r = await a.commands.run('echo "$FROM_CREATE"; id -un; pwd')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'yes\nuser\n/home/user\n')
  const bg = await a.commands.run('cat', { background: true, stdin: true })
  await a.commands.sendStdin(bg.pid, 'through stdin\n')
  await a.commands.closeStdin(bg.pid)
  assert.equal((await bg.wait()).stdout, 'through stdin\n')
})

await check('files through envd: write, read, list, exists, remove', async () => {
  const info = await a.files.write('/home/user/sdk/notes.txt', 'kept across a pause\n')
  assert.equal(info.path, '/home/user/sdk/notes.txt')
  assert.equal(await a.files.read('/home/user/sdk/notes.txt'), 'kept across a pause\n')
  assert.deepEqual((await a.files.list('/home/user/sdk')).map((e) => e.name), ['notes.txt'])
  await a.files.write('/home/user/sdk/gone.bin', new Uint8Array([0, 1, 2, 255]))
  assert.deepEqual([...await a.files.read('/home/user/sdk/gone.bin', { format: 'bytes' })], [0, 1, 2, 255])
  await a.files.remove('/home/user/sdk/gone.bin')
  assert.equal(await a.files.exists('/home/user/sdk/gone.bin'), false)
})

await check('setTimeout: POST /sandboxes/{id}/timeout moves endAt', async () => {
  await a.setTimeout(120_000)
  const info = await a.getInfo()
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 100_000 && left <= 121_000, `endAt is ${left} ms away`)
  await assert.rejects(a.setTimeout(48 * 3600_000), (e) => e instanceof SandboxError && /Max instance length/.test(e.message))
})

await check('getInfo: the sandbox record', async () => {
  const info = await Sandbox.getInfo(a.sandboxId)
  assert.equal(info.sandboxId, a.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, mine('a'))
  assert.equal(info.envdVersion, '0.6.4')
  assert.equal(info.lifecycle.onTimeout, 'kill')
})

await check('getMetrics: GET /sandboxes/{id}/metrics', async () => {
  const m = await a.getMetrics()
  assert.ok(m.length >= 1)
  const last = m[m.length - 1]
  assert.ok(last.memUsed > 0 && last.memTotal >= last.memUsed, JSON.stringify(last))
  assert.ok(last.diskUsed > 0, 'the file written above takes disk')
  assert.equal(last.cpuCount, 2)
})

await check('Sandbox.list with a metadata filter: GET /v2/sandboxes', async () => {
  const only = (await Sandbox.list({ query: { metadata: mine('a') } }).nextItems()).map((s) => s.sandboxId)
  assert.deepEqual(only, [a.sandboxId])
  const both = (await Sandbox.list({ query: { metadata: { suite: RUN_ID } } }).nextItems()).map((s) => s.sandboxId)
  assert.deepEqual(both.sort(), [a.sandboxId, b.sandboxId].sort())
})

await check('pause and betaPause: 204, then 409 (already paused) is false', async () => {
  assert.equal(await a.pause(), true)
  assert.equal(await a.betaPause(), false)
  assert.equal((await a.getInfo()).state, 'paused')
  const paused = await Sandbox.list({ query: { metadata: { suite: RUN_ID }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [a.sandboxId])
  const running = await Sandbox.list({ query: { metadata: { suite: RUN_ID }, state: ['running'] } }).nextItems()
  assert.deepEqual(running.map((s) => s.sandboxId), [b.sandboxId])
  // no autoResume: traffic does not wake it
  await assert.rejects(a.commands.run('true', { requestTimeoutMs: 10_000 }))
})

await check('Sandbox.connect: resumes a paused sandbox, files kept, processes gone', async () => {
  const again = await Sandbox.connect(a.sandboxId)
  assert.equal(again.envdApiUrl, envdUrl(a.sandboxId))
  assert.equal(await again.files.read('/home/user/sdk/notes.txt'), 'kept across a pause\n')
  assert.equal((await again.commands.run('echo "$FROM_CREATE"')).stdout, 'yes\n')
  assert.equal((await again.getInfo()).state, 'running')
  const same = await Sandbox.connect(a.sandboxId) // running: 200
  assert.equal(same.sandboxId, a.sandboxId)
})

await check('autoResume: traffic to a paused sandbox resumes it', async () => {
  auto = await Sandbox.create('base', { timeoutMs: 60_000, metadata: mine('auto'),
    lifecycle: { onTimeout: 'pause', autoResume: true } })
  ids.push(auto.sandboxId)
  await auto.files.write('/home/user/auto.txt', 'before the pause')
  assert.equal((await auto.getInfo()).lifecycle.autoResume, true)
  assert.equal(await auto.pause(), true)
  assert.equal((await Sandbox.getInfo(auto.sandboxId)).state, 'paused')
  assert.equal(await auto.files.read('/home/user/auto.txt'), 'before the pause')
  assert.equal((await Sandbox.getInfo(auto.sandboxId)).state, 'running')
})

await check('kill: 204 is true, 404 is false; connect after it: SandboxNotFoundError', async () => {
  for (const s of [a, b, auto]) assert.equal(await s.kill(), true)
  assert.equal(await Sandbox.kill(a.sandboxId), false)
  await assert.rejects(Sandbox.connect(a.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.getInfo(b.sandboxId), SandboxNotFoundError)
  assert.deepEqual(await Sandbox.list({ query: { metadata: { suite: RUN_ID } } }).nextItems(), [])
})

await check('errors as E2B gives them: a wrong key (401), a timeout above the plan (400)', async () => {
  await assert.rejects(Sandbox.create('base', { apiKey: 'e2b_wrong' }), AuthenticationError)
  await assert.rejects(Sandbox.create('base', { timeoutMs: 2 * 3600_000 }),
    (e) => e instanceof SandboxError && /Timeout cannot be greater than 1 hours/.test(e.message))
  await assert.rejects(Sandbox.create('no-such-template'), (e) => /not found/.test(e.message))
})

await check("the SDK's own API client on the unversioned create and connect dsh uses", async () => {
  const api = new ApiClient(new ConnectionConfig()).api
  const made = await api.POST('/sandboxes', { body: { templateID: 'base', timeout: 30, secure: true,
    metadata: mine('v1'), allow_internet_access: false } })
  assert.equal(made.response.status, 201, JSON.stringify(made.error))
  const id = made.data.sandboxID
  ids.push(id)
  assert.equal(typeof made.data.envdAccessToken, 'string')
  const missing = await api.POST('/sandboxes/{sandboxID}/connect', { params: { path: { sandboxID: id } }, body: {} })
  assert.equal(missing.response.status, 400) // ConnectSandbox requires timeout
  const conn = await api.POST('/sandboxes/{sandboxID}/connect', { params: { path: { sandboxID: id } },
    body: { timeout: 30 } })
  assert.equal(conn.response.status, 200)
  assert.equal(conn.data.envdAccessToken, made.data.envdAccessToken)
  const info = await Sandbox.getInfo(id)
  assert.equal(info.allowInternetAccess, false)
  // the handle it answered works with the SDK's Sandbox, as dsh's does
  const s = await Sandbox.connect(id)
  assert.equal((await s.commands.run('echo v1')).stdout, 'v1\n')
  assert.equal(await s.kill(), true)
})

console.log(`REPORT ${JSON.stringify({ passed, failed, ids })}`)
process.exit(failed.length ? 1 : 0)
