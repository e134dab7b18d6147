// The official E2B JavaScript SDK (npm "e2b", pinned in package.json) against
// dshd: commands, background commands with stdin, kill, list, connect,
// timeouts, PTYs and every files API. Run by spec/03-dshd/90-sdk_compat_spec.lua.
//
//   E2B_SANDBOX_URL=http://127.0.0.1:PORT [DSH_ENVD_TOKEN=...] node sdk_test.mjs SANDBOX_ID ROOT
//
// The SDK runs in debug mode (Sandbox.connect(id, {debug: true})): no E2B API
// call, envd at E2B_SANDBOX_URL. A local dsh sandbox has an access token; the
// SDK sends it (X-Access-Token, URL signatures) when its Sandbox is
// constructed with `envdAccessToken`, as Sandbox.connect does for a cloud
// sandbox. Debug mode leaves it unset, so a subclass adds it from
// DSH_ENVD_TOKEN (never from argv) and everything else is the stock SDK.
//
// ROOT is a scratch directory inside the sandbox; it is removed at the end.
// Output: one line per case ("ok   <name>" or "FAIL <name> - <error>"), then
// "REPORT <json>" with the passed and failed case names; exit 1 on any failure.
import { Sandbox, CommandExitError, FileNotFoundError, InvalidArgumentError, TimeoutError } from 'e2b'
import { createHash } from 'node:crypto'
import assert from 'node:assert/strict'

const [SANDBOX_ID, ROOT] = process.argv.slice(2)
if (!SANDBOX_ID || !ROOT || !process.env.E2B_SANDBOX_URL) {
  console.error('usage: E2B_SANDBOX_URL=http://HOST:PORT [DSH_ENVD_TOKEN=...] node sdk_test.mjs SANDBOX_ID ROOT')
  process.exit(2)
}

class TokenSandbox extends Sandbox {
  constructor(opts) {
    super({ ...opts, envdAccessToken: process.env.DSH_ENVD_TOKEN || undefined })
  }
}

const passed = []
const failed = []
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
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function until(what, pred, ms = 20000) { // a ceiling, never a guess of how long it takes
  const end = Date.now() + ms
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

const sbx = await TokenSandbox.connect(SANDBOX_ID, { debug: true })
assert.equal(sbx.sandboxId, SANDBOX_ID)
const f = sbx.files
const cmd = sbx.commands
await f.remove(ROOT)
await f.makeDir(ROOT)

// --- commands -----------------------------------------------------------------------------

await check('isRunning', async () => assert.equal(await sbx.isRunning(), true))

await check('commands.run: stdout, stderr, exit code, callbacks', async () => {
  const out = [], err = []
  const r = await cmd.run('echo hi; echo err >&2; printf "h\\xc3\\xa9llo"', {
    onStdout: (d) => out.push(d), onStderr: (d) => err.push(d),
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hi\nhéllo')
  assert.equal(r.stderr, 'err\n')
  assert.equal(r.error, undefined)
  assert.equal(out.join(''), 'hi\nhéllo')
  assert.equal(err.join(''), 'err\n')
})

await check('commands.run: non-zero exit -> CommandExitError', async () => {
  const e = await cmd.run('echo partial; exit 3').then(() => null, (x) => x)
  assert.ok(e instanceof CommandExitError, String(e))
  assert.equal(e.exitCode, 3)
  assert.equal(e.error, 'exit status 3')
  assert.equal(e.stdout, 'partial\n')
})

await check('commands.run: envs and cwd', async () => {
  const r = await cmd.run('echo "$FOO"; pwd; echo "$HOME $USER"', { envs: { FOO: 'bar baz' }, cwd: ROOT })
  assert.equal(r.stdout, `bar baz\n${ROOT}\n/home/user user\n`)
})

await check('commands.run: missing cwd -> InvalidArgumentError', async () => {
  await assert.rejects(cmd.run('true', { cwd: `${ROOT}/no/such/dir` }), InvalidArgumentError)
})

await check('commands.run: stdin is closed unless asked for', async () => {
  const r = await cmd.run('cat; echo done')
  assert.equal(r.stdout, 'done\n')
})

await check('background command with stdin: sendStdin, closeStdin', async () => {
  const h = await cmd.run('cat', { background: true, stdin: true })
  assert.ok(h.pid > 0)
  await cmd.sendStdin(h.pid, 'hello\n')
  await h.sendStdin(new TextEncoder().encode('bytes ünï\n'))
  await cmd.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nbytes ünï\n')
})

await check('list and kill', async () => {
  const h = await cmd.run('sleep 30', { background: true, envs: { MARK: 'x' }, cwd: ROOT })
  const mine = (await cmd.list()).find((p) => p.pid === h.pid)
  assert.deepEqual(mine, { pid: h.pid, cmd: '/bin/bash', args: ['-l', '-c', 'sleep 30'], envs: { MARK: 'x' }, cwd: ROOT })
  assert.equal(await cmd.kill(h.pid), true)
  const e = await h.wait().then(() => null, (x) => x)
  assert.ok(e instanceof CommandExitError, String(e))
  assert.equal(e.exitCode, -1)
  assert.equal(e.error, 'signal: killed')
  assert.equal((await cmd.list()).some((p) => p.pid === h.pid), false)
  assert.equal(await cmd.kill(h.pid), false)
})

await check('handle.kill', async () => {
  const h = await cmd.run('sleep 30', { background: true })
  assert.equal(await h.kill(), true)
  await assert.rejects(h.wait(), CommandExitError)
})

await check('connect to a running command', async () => {
  const h = await cmd.run('echo first; sleep 0.5; for i in 1 2 3; do echo line$i; sleep 0.1; done', { background: true })
  await until('first line', () => h.stdout.includes('first'))
  await h.disconnect()
  const seen = []
  const c = await cmd.connect(h.pid, { onStdout: (d) => seen.push(d) })
  assert.equal(c.pid, h.pid)
  const r = await c.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(seen.join(''), 'line1\nline2\nline3\n')
  await assert.rejects(cmd.connect(999999), (e) => /not found/.test(String(e)))
})

await check('timeoutMs kills the command -> TimeoutError', async () => {
  const t0 = Date.now()
  await assert.rejects(cmd.run('sleep 20; echo late', { timeoutMs: 700 }), TimeoutError)
  assert.ok(Date.now() - t0 < 10000)
  await until('the timed-out command to go', async () =>
    !(await cmd.list()).some((p) => p.args.join(' ').includes('sleep 20')))
})

// --- PTY ------------------------------------------------------------------------------------

await check('pty: create, sendInput, resize, kill', async () => {
  const dec = new TextDecoder()
  let out = ''
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
  assert.ok(h.pid > 0)
  const enc = new TextEncoder()
  await sbx.pty.sendInput(h.pid, enc.encode('echo pty-$((6*7)); stty size\n'))
  await until('pty output', () => out.includes('pty-42') && out.includes('24 80'))
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo "$TERM"\n'))
  await until('resized', () => out.includes('30 100') && out.includes('xterm-256color'))
  assert.equal(await sbx.pty.kill(h.pid), true)
  const e = await h.wait().then(() => null, (x) => x)
  assert.ok(e instanceof CommandExitError, String(e))
  assert.equal(e.error, 'signal: killed')
  assert.equal(await sbx.pty.kill(h.pid), false)
})

// --- files -----------------------------------------------------------------------------------

await check('write text (single -> object)', async () => {
  const info = await f.write(`${ROOT}/hello.txt`, 'hello world\n')
  assert.deepEqual({ path: info.path, name: info.name, type: info.type },
    { path: `${ROOT}/hello.txt`, name: 'hello.txt', type: 'file' })
})
await check('read text, bytes, blob, stream', async () => {
  assert.equal(await f.read(`${ROOT}/hello.txt`), 'hello world\n')
  const b = await f.read(`${ROOT}/hello.txt`, { format: 'bytes' })
  assert.ok(b instanceof Uint8Array)
  assert.equal(Buffer.from(b).toString(), 'hello world\n')
  assert.equal(await (await f.read(`${ROOT}/hello.txt`, { format: 'blob' })).text(), 'hello world\n')
  let s = ''
  for await (const c of await f.read(`${ROOT}/hello.txt`, { format: 'stream' })) s += Buffer.from(c).toString()
  assert.equal(s, 'hello world\n')
})
await check('write + read empty file', async () => {
  await f.write(`${ROOT}/empty.txt`, '')
  assert.equal(await f.read(`${ROOT}/empty.txt`), '')
  assert.equal((await f.read(`${ROOT}/empty.txt`, { format: 'bytes' })).length, 0)
})
await check('write bytes: all 256 values', async () => {
  const data = new Uint8Array(256 * 4).map((_, i) => i % 256)
  await f.write(`${ROOT}/bin/all.bin`, data.buffer)
  assert.deepEqual(Buffer.from(await f.read(`${ROOT}/bin/all.bin`, { format: 'bytes' })), Buffer.from(data))
  const r = await cmd.run(`sha256sum ${ROOT}/bin/all.bin`)
  assert.equal(r.stdout.split(' ')[0], createHash('sha256').update(data).digest('hex'))
})
await check('write several files (array)', async () => {
  const res = await f.write([
    { path: `${ROOT}/multi/a.txt`, data: 'A' },
    { path: `${ROOT}/multi/sub/b.txt`, data: 'BB' },
    { path: `${ROOT}/multi/c.bin`, data: new Uint8Array([0, 1, 2]).buffer },
  ])
  assert.ok(Array.isArray(res))
  assert.deepEqual(res.map((x) => x.path), [`${ROOT}/multi/a.txt`, `${ROOT}/multi/sub/b.txt`, `${ROOT}/multi/c.bin`])
  assert.equal(await f.read(`${ROOT}/multi/sub/b.txt`), 'BB')
})
await check('write a unicode path with spaces', async () => {
  const p = `${ROOT}/a b/ü ñ.txt`
  assert.equal((await f.write(p, 'ünï')).path, p)
  assert.equal(await f.read(p), 'ünï')
})
await check('write a stream, gzip, useOctetStream', async () => {
  const stream = new ReadableStream({
    start(c) { for (const x of ['abc', 'def', 'ghi']) c.enqueue(new TextEncoder().encode(x)); c.close() },
  })
  assert.equal((await f.write(`${ROOT}/streamed.txt`, stream)).path, `${ROOT}/streamed.txt`)
  assert.equal(await f.read(`${ROOT}/streamed.txt`), 'abcdefghi')
  const text = 'gzip me '.repeat(10000)
  await f.write(`${ROOT}/gz.txt`, text, { gzip: true })
  assert.equal(await f.read(`${ROOT}/gz.txt`), text)
  const res = await f.write([{ path: `${ROOT}/gzm/1.txt`, data: 'one' }, { path: `${ROOT}/gzm/2.txt`, data: 'two' }], { gzip: true })
  assert.equal(res.length, 2)
  assert.equal(await f.read(`${ROOT}/gzm/2.txt`), 'two')
  await f.write(`${ROOT}/oct.txt`, 'octet', { useOctetStream: true })
  assert.equal(await f.read(`${ROOT}/oct.txt`), 'octet')
})
await check('overwrite truncates', async () => {
  await f.write(`${ROOT}/ow.txt`, 'long long content')
  await f.write(`${ROOT}/ow.txt`, 'short')
  assert.equal(await f.read(`${ROOT}/ow.txt`), 'short')
})
await check('big file 24 MiB round trip', async () => {
  const big = Buffer.alloc(24 << 20)
  for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i * 2654435761 >>> 0, i)
  await f.write(`${ROOT}/big.bin`, big)
  const back = await f.read(`${ROOT}/big.bin`, { format: 'bytes' })
  assert.equal(createHash('sha256').update(back).digest('hex'), createHash('sha256').update(big).digest('hex'))
  await f.remove(`${ROOT}/big.bin`)
})
await check('exists', async () => {
  assert.equal(await f.exists(`${ROOT}/hello.txt`), true)
  assert.equal(await f.exists(`${ROOT}/nope.txt`), false)
  assert.equal(await f.exists(`${ROOT}/hello.txt/below`), false)
})
await check('getInfo file and dir', async () => {
  const i = await f.getInfo(`${ROOT}/hello.txt`)
  assert.deepEqual([i.name, i.type, i.path, i.size, i.mode, i.permissions, i.owner, i.group],
    ['hello.txt', 'file', `${ROOT}/hello.txt`, 12, 0o644, '-rw-r--r--', 'user', 'user'])
  assert.ok(i.modifiedTime instanceof Date && Math.abs(i.modifiedTime - Date.now()) < 60000)
  const d = await f.getInfo(`${ROOT}/multi`)
  assert.deepEqual([d.type, d.permissions], ['dir', 'drwxr-xr-x'])
  await assert.rejects(f.getInfo(`${ROOT}/nope`), FileNotFoundError)
})
await check('makeDir', async () => {
  assert.equal(await f.makeDir(`${ROOT}/newdir/x/y`), true)
  assert.equal(await f.makeDir(`${ROOT}/newdir/x/y`), false)
  assert.equal((await f.getInfo(`${ROOT}/newdir/x/y`)).type, 'dir')
  await assert.rejects(f.makeDir(`${ROOT}/hello.txt`), InvalidArgumentError)
})
await check('list depth 1 and 2 (sorted, absolute paths)', async () => {
  const l = await f.list(`${ROOT}/multi`)
  assert.deepEqual(l.map((e) => [e.name, e.type]), [['a.txt', 'file'], ['c.bin', 'file'], ['sub', 'dir']])
  assert.deepEqual(l.map((e) => e.path), [`${ROOT}/multi/a.txt`, `${ROOT}/multi/c.bin`, `${ROOT}/multi/sub`])
  const l2 = await f.list(`${ROOT}/multi`, { depth: 2 })
  assert.deepEqual(l2.map((e) => e.path),
    [`${ROOT}/multi/a.txt`, `${ROOT}/multi/c.bin`, `${ROOT}/multi/sub`, `${ROOT}/multi/sub/b.txt`])
  await assert.rejects(f.list(`${ROOT}/nope`), FileNotFoundError)
  await assert.rejects(f.list(`${ROOT}/hello.txt`), InvalidArgumentError)
})
await check('symlink entries', async () => {
  await cmd.run(`mkdir -p ${ROOT}/links && cd ${ROOT}/links && ln -s ${ROOT}/hello.txt tofile && ` +
    `ln -s ${ROOT}/multi todir && ln -s ${ROOT}/missing broken`)
  const i = await f.getInfo(`${ROOT}/links/tofile`)
  assert.deepEqual([i.type, i.symlinkTarget, i.permissions], ['file', `${ROOT}/hello.txt`, 'Lrwxrwxrwx'])
  assert.equal((await f.getInfo(`${ROOT}/links/todir`)).type, 'dir')
  const b = await f.getInfo(`${ROOT}/links/broken`)
  assert.deepEqual([b.type, b.symlinkTarget], [undefined, `${ROOT}/links/broken`])
  assert.deepEqual((await f.list(`${ROOT}/links`)).map((e) => e.name), ['todir', 'tofile'])
  assert.equal((await f.list(`${ROOT}/links/todir`))[0].path, `${ROOT}/links/todir/a.txt`)
})
await check('rename', async () => {
  await f.write(`${ROOT}/mv/src.txt`, 'move me')
  const i = await f.rename(`${ROOT}/mv/src.txt`, `${ROOT}/mv/deep/er/dst.txt`)
  assert.deepEqual([i.path, i.name], [`${ROOT}/mv/deep/er/dst.txt`, 'dst.txt'])
  assert.equal(await f.read(`${ROOT}/mv/deep/er/dst.txt`), 'move me')
  assert.equal(await f.exists(`${ROOT}/mv/src.txt`), false)
  await assert.rejects(f.rename(`${ROOT}/mv/none`, `${ROOT}/mv/x`), FileNotFoundError)
})
await check('remove (recursive; missing is fine)', async () => {
  await f.remove(`${ROOT}/multi`)
  assert.equal(await f.exists(`${ROOT}/multi`), false)
  await f.remove(`${ROOT}/multi`)
  await f.remove(`${ROOT}/hello.txt/x`)
})
await check('read errors: missing -> FileNotFoundError, directory -> InvalidArgumentError', async () => {
  await assert.rejects(f.read(`${ROOT}/none.txt`), FileNotFoundError)
  await assert.rejects(f.read(`${ROOT}/newdir`), InvalidArgumentError)
  await assert.rejects(f.write(`${ROOT}/newdir`, 'x'), InvalidArgumentError)
})
await check('relative paths resolve against the home', async () => {
  const info = await f.write('dsh-sdk-rel.txt', 'rel')
  assert.equal(info.path, '/home/user/dsh-sdk-rel.txt')
  assert.equal(await f.read(info.path), 'rel')
  assert.equal((await f.getInfo('dsh-sdk-rel.txt')).path, info.path)
  await f.remove('dsh-sdk-rel.txt')
})
await check('signed upload and download URLs', async () => {
  const up = await sbx.uploadUrl(`${ROOT}/signed.txt`)
  assert.match(up, /signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob(['via url']), `${ROOT}/signed.txt`)
  assert.equal((await fetch(up, { method: 'POST', body: form })).status, 200)
  const down = await sbx.downloadUrl(`${ROOT}/signed.txt`)
  const res = await fetch(down)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'via url')
  const bad = await fetch(down.replace(/signature=[^&]+/, 'signature=v1_x'))
  assert.equal(bad.status, 401)
})
await check('watchDir recursive + includeEntry', async () => {
  await f.makeDir(`${ROOT}/w`)
  const events = []
  const h = await f.watchDir(`${ROOT}/w`, (e) => events.push(e), { recursive: true, includeEntry: true })
  await f.write(`${ROOT}/w/one.txt`, '1')
  await f.makeDir(`${ROOT}/w/d1/d2`)
  await f.write(`${ROOT}/w/d1/d2/two.txt`, '22')
  await f.rename(`${ROOT}/w/one.txt`, `${ROOT}/w/uno.txt`)
  await f.remove(`${ROOT}/w/uno.txt`)
  const want = ['create:one.txt', 'write:one.txt', 'create:d1', 'create:d1/d2', 'create:d1/d2/two.txt',
    'write:d1/d2/two.txt', 'rename:one.txt', 'create:uno.txt', 'remove:uno.txt']
  const s = () => events.map((e) => `${e.type}:${e.name}`)
  await until(`events ${want.join(' ')}`, () => want.every((w) => s().includes(w)))
  await h.stop()
  const c = events.find((e) => e.name === 'one.txt' && e.type === 'create')
  assert.deepEqual([c.entry.type, c.entry.path], ['file', `${ROOT}/w/one.txt`])
  assert.equal(events.find((e) => e.type === 'remove').entry, undefined)
})
await check('watchDir non-recursive ignores subdirectories', async () => {
  await f.makeDir(`${ROOT}/w2/sub`)
  const events = []
  const h = await f.watchDir(`${ROOT}/w2`, (e) => events.push(e))
  await f.write(`${ROOT}/w2/sub/x.txt`, 'x')
  await f.write(`${ROOT}/w2/top.txt`, 't')
  await until('create:top.txt', () => events.some((e) => e.type === 'create' && e.name === 'top.txt'))
  await sleep(200)
  await h.stop()
  assert.ok(!events.some((e) => e.name.includes('x.txt')), events.map((e) => e.name).join(' '))
})
await check('watchDir errors and timeout', async () => {
  await assert.rejects(f.watchDir(`${ROOT}/nowhere`, () => {}), FileNotFoundError)
  await assert.rejects(f.watchDir(`${ROOT}/gz.txt`, () => {}), InvalidArgumentError)
  let exitErr = 'none'
  const h = await f.watchDir(`${ROOT}/w`, () => {}, { timeoutMs: 500, onExit: (e) => { exitErr = e } })
  await until('onExit', () => exitErr !== 'none')
  assert.ok(exitErr instanceof TimeoutError, String(exitErr))
  await h.stop()
})
await check('many parallel requests', async () => {
  await Promise.all([...Array(100).keys()].map((i) => f.write(`${ROOT}/par/${i}.txt`, String(i))))
  const l = await f.list(`${ROOT}/par`)
  assert.equal(l.length, 100)
  const rs = await Promise.all(l.map((e) => f.read(e.path)))
  assert.deepEqual(rs.map(Number).sort((a, b) => a - b), [...Array(100).keys()])
})

await f.remove(ROOT)
console.log(`REPORT ${JSON.stringify({ passed, failed })}`)
process.exit(failed.length ? 1 : 0)
