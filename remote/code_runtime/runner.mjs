// code-runtime-runner: runs one TypeScript or JavaScript program for the
// supervisor (code-runtime-supervisor.lua), in a fresh worker thread.
//
// Main thread: reads the boot and binding replies from fd 4 and writes logs,
// calls and the result to fd 3, one JSON line each. It strips TypeScript
// types with Node's own module.stripTypeScriptTypes (Node >= 22.13), starts a
// Worker on this same file with an empty environment and a heap limit,
// measures the worker's event-loop busy time against computeMs, and when the
// run settles terminates the worker and drains its output before the last
// line. The supervisor kills this whole process afterwards.
//
// Worker thread: saves every built-in it relies on before the program runs
// (so a program that mutates globals cannot break transport or results),
// turns console and process.stdout/stderr writes into logs, exposes each
// binding namespace as a null-prototype object of async functions, and runs
// the program as an async function body. Values cross as the lossless wire
// of harness-behaviour.md §3.3. Dependency-free: Node's standard library only.
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

const LOG_PIECE = 16384;

// ---------------------------------------------------------------------------------------------
// Lossless JSON wire (§3.3), with intrinsics captured at load time.
const $Array = Array;
const $isArray = Array.isArray;
const $getPrototypeOf = Object.getPrototypeOf;
const $ownKeys = Reflect.ownKeys;
const $getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
const $ArrayPrototype = Array.prototype;
const $ObjectPrototype = Object.prototype;
const $isFinite = Number.isFinite;
const $isSafeInteger = Number.isSafeInteger;
const $is = Object.is;
const $create = Object.create;
const $defineProperty = Object.defineProperty;
const $Set = Set;
const $setHas = Set.prototype.has;
const $setAdd = Set.prototype.add;
const $setDelete = Set.prototype.delete;
const $reflectApply = Reflect.apply;
const uncurry = (f) => (self, ...args) => $reflectApply(f, self, args);
const setHas = uncurry($setHas);
const setAdd = uncurry($setAdd);
const setDelete = uncurry($setDelete);
const $push = uncurry(Array.prototype.push);
const $pop = uncurry(Array.prototype.pop);
const $String = String;
const $Error = Error;
const $Promise = Promise;
const $apply = $reflectApply;

function isPlainArray(v) {
  if (!$isArray(v) || $getPrototypeOf(v) !== $ArrayPrototype) return false;
  const keys = $ownKeys(v);
  if (keys.length !== v.length + 1) return false;
  for (let i = 0; i < v.length; i++) {
    const d = $getOwnPropertyDescriptor(v, i);
    if (!d || !('value' in d)) return false;
  }
  return true;
}

// value -> token list, or undefined when it is not lossless.
export function encodeWire(root) {
  const out = [];
  const onPath = new $Set();
  const stack = [{ v: root }];
  while (stack.length) {
    const top = $pop(stack);
    if (top.exit) { setDelete(onPath, top.exit); continue; }
    const v = top.v;
    if (v === null || typeof v === 'boolean' || typeof v === 'string') { $push(out, v); continue; }
    if (typeof v === 'number') {
      if (!$isFinite(v) || $is(v, -0)) return undefined;
      $push(out, v);
      continue;
    }
    if (typeof v !== 'object') return undefined;
    if (setHas(onPath, v)) return undefined;
    if ($isArray(v)) {
      if (!isPlainArray(v)) return undefined;
      $push(out, { kind: 'array', length: v.length });
      setAdd(onPath, v);
      $push(stack, { exit: v });
      for (let i = v.length - 1; i >= 0; i--) $push(stack, { v: $getOwnPropertyDescriptor(v, i).value });
      continue;
    }
    const proto = $getPrototypeOf(v);
    if (proto !== null && proto !== $ObjectPrototype) return undefined;
    const keys = $ownKeys(v);
    const values = [];
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (typeof k !== 'string') return undefined;
      const d = $getOwnPropertyDescriptor(v, k);
      if (!d.enumerable || !('value' in d)) return undefined;
      $push(values, d.value);
    }
    const copy = [];
    for (let i = 0; i < keys.length; i++) $push(copy, keys[i]);
    $push(out, { kind: 'object', keys: copy });
    setAdd(onPath, v);
    $push(stack, { exit: v });
    for (let i = values.length - 1; i >= 0; i--) $push(stack, { v: values[i] });
  }
  return out;
}

// token list -> value, or undefined when malformed.
export function decodeWire(tokens) {
  if (!$isArray(tokens) || tokens.length === 0) return undefined;
  const stack = [];
  let root; let have = false;
  for (let i = 0; i < tokens.length; i++) {
    if (have) return undefined;
    const t = tokens[i];
    let value; let isValue = true;
    if (t === null || typeof t === 'boolean' || typeof t === 'string') value = t;
    else if (typeof t === 'number') {
      if (!$isFinite(t) || $is(t, -0)) return undefined;
      value = t;
    } else if (typeof t === 'object' && !$isArray(t)) {
      const keys = $ownKeys(t);
      if (keys.length !== 2) return undefined;
      let count; let c;
      if (t.kind === 'array' && $isSafeInteger(t.length) && t.length >= 0) {
        count = t.length; c = new $Array(count); c.length = 0;
      } else if (t.kind === 'object' && $isArray(t.keys)) {
        const seen = new $Set();
        for (let j = 0; j < t.keys.length; j++) {
          const k = t.keys[j];
          if (typeof k !== 'string' || setHas(seen, k)) return undefined;
          setAdd(seen, k);
        }
        count = t.keys.length; c = {};
      } else return undefined;
      if (count > tokens.length - i - 1) return undefined;
      if (count === 0) value = c;
      else { $push(stack, { c, keys: t.kind === 'object' ? t.keys : null, n: 0, count }); isValue = false; }
    } else return undefined;
    while (isValue) {
      const f = stack[stack.length - 1];
      if (!f) { root = value; have = true; break; }
      if (f.keys) $defineProperty(f.c, f.keys[f.n], { value, enumerable: true, writable: true, configurable: true });
      else $push(f.c, value);
      f.n++;
      if (f.n < f.count) break;
      value = f.c;
      $pop(stack);
    }
  }
  return have ? root : undefined;
}

// ---------------------------------------------------------------------------------------------
if (isMainThread) await main(); else await workerMain();

async function main() {
  const fs = await import('node:fs');
  let settled = false;
  const put = (msg) => {
    const line = JSON.stringify(msg) + '\n';
    let off = 0;
    const buf = Buffer.from(line, 'utf8');
    while (off < buf.length) {
      try { off += fs.writeSync(3, buf, off); } catch (e) { if (e.code !== 'EAGAIN') process.exit(3); }
    }
  };
  const finish = (msg) => { if (!settled) { settled = true; put(msg); } process.exit(0); };
  const fail = (kind, message) => finish({ type: 'done', error: { kind, message } });

  // Lines from the supervisor. A long line comes in many chunks: they are
  // kept apart and joined once, and only each new chunk is searched for the
  // end of the line (searching the joined text again would be quadratic).
  const lines = [];
  let waiting = null;
  let onLine = (line) => { if (waiting) { const w = waiting; waiting = null; w(line); } else lines.push(line); };
  let parts = [];
  const input = fs.createReadStream(null, { fd: 4, encoding: 'utf8', highWaterMark: 65536 });
  input.on('data', (s) => {
    let start = 0; let nl;
    while ((nl = s.indexOf('\n', start)) >= 0) {
      parts.push(s.slice(start, nl));
      const line = parts.length === 1 ? parts[0] : parts.join('');
      parts = [];
      start = nl + 1;
      onLine(line);
    }
    if (start < s.length) parts.push(s.slice(start));
  });
  input.on('end', () => process.exit(3));
  input.on('error', () => process.exit(3));
  const firstLine = () => new Promise((resolve) => { if (lines.length) resolve(lines.shift()); else waiting = resolve; });

  const boot = JSON.parse(await firstLine());
  const maxOut = boot.maxOutputBytes;
  let code = boot.code;
  if (boot.language === 'typescript') {
    const mod = await import('node:module');
    if (typeof mod.stripTypeScriptTypes !== 'function') {
      return fail('exception', `TypeScript needs Node.js 22.13 or later (module.stripTypeScriptTypes); ` +
        `this sandbox has Node.js ${process.version}`);
    }
    const head = 'async function __dsh_program__() {\n';
    try {
      const stripped = mod.stripTypeScriptTypes(head + code + '\n}', { mode: 'strip' });
      code = stripped.slice(head.length, stripped.length - 2);
    } catch (e) {
      return fail('exception', String((e && e.message) || e));
    }
  }

  // Logs: at most what the ledger could keep, in pieces that end on code points.
  const log = (text) => {
    if (settled) return;
    if (text.length > maxOut + 4) text = text.slice(0, maxOut + 4);
    while (text.length > LOG_PIECE) {
      let k = LOG_PIECE;
      const c = text.charCodeAt(k - 1);
      if (c >= 0xd800 && c <= 0xdbff) k--;
      put({ type: 'log', text: text.slice(0, k), more: true });
      text = text.slice(k);
    }
    put({ type: 'log', text });
  };

  const worker = new Worker(new URL(import.meta.url), {
    workerData: { boot, code }, env: {}, execArgv: [], argv: [], stdout: true, stderr: true,
    resourceLimits: { maxOldGenerationSizeMb: boot.maxOldGenerationSizeMb || 512 },
  });
  const streamEnded = (s) => new Promise((resolve) => { if (s.readableEnded) resolve(); else s.on('end', resolve); s.on('close', resolve); });
  for (const s of [worker.stdout, worker.stderr]) { s.setEncoding('utf8'); s.on('data', (t) => log(t)); }
  let terminal = null;
  const settle = async (msg) => {
    if (terminal) return;
    terminal = msg;
    clearInterval(clock);
    const ended = Promise.all([streamEnded(worker.stdout), streamEnded(worker.stderr)]);
    await worker.terminate().catch(() => {});
    await Promise.race([ended, new Promise((r) => setTimeout(r, 200))]);
    finish(msg);
  };
  worker.on('message', (m) => {
    if (terminal || !m || typeof m !== 'object') return;
    if (m.type === 'log' && typeof m.text === 'string') log(m.text);
    else if (m.type === 'call') put(m);
    else if (m.type === 'done') settle(m);
  });
  worker.on('error', (e) => settle({ type: 'done', error: { kind: 'worker-exit', message: `remote worker error: ${(e && e.message) || e}` } }));
  worker.on('exit', (c) => settle({ type: 'done', error: { kind: 'worker-exit', message: `remote worker exited with code ${c} before completing` } }));
  const clock = setInterval(() => {
    const busy = worker.performance.eventLoopUtilization().active;
    if (busy > boot.computeMs) {
      settle({ type: 'done', error: { kind: 'timeout', message: `compute budget exhausted (${boot.computeMs}ms busy)` } });
    }
  }, 25);
  onLine = (line) => {
    let m;
    try { m = JSON.parse(line); } catch { return; }
    if (m && m.type === 'reply') worker.postMessage(m);
  };
  for (const l of lines.splice(0)) onLine(l);
}

// A stack trace with the program's own frames only, as program:<line>:<column>.
// The program's first line is line 4 of the function V8 compiles.
function programStack(stack) {
  try { return programFrames(stack); } catch { return stack; } // built-ins the program broke
}

function programFrames(stack) {
  const out = [];
  for (const line of stack.split('\n')) {
    if (!/^\s+at /.test(line)) { out.push(line); continue; }
    const m = /<anonymous>:(\d+):(\d+)\)?$/.exec(line);
    if (m) out.push(`    at program:${Number(m[1]) - 3}:${m[2]}`);
  }
  return out.join('\n');
}

async function workerMain() {
  const { inspect } = await import('node:util');
  const { boot, code } = workerData;
  const post = parentPort.postMessage.bind(parentPort);
  const onMessage = parentPort.on.bind(parentPort);
  const $queueMicrotask = queueMicrotask;
  const $Map = Map;
  const mapGet = uncurry(Map.prototype.get);
  const mapSet = uncurry(Map.prototype.set);
  const mapDelete = uncurry(Map.prototype.delete);
  const $join = uncurry(Array.prototype.join);
  const $AsyncFunction = (async () => {}).constructor;
  const $Reflect_construct = Reflect.construct;

  const render = (v) => (typeof v === 'string' ? v
    : inspect(v, { depth: 4, maxArrayLength: 100, maxStringLength: 10000 }));
  const log = (args) => {
    const parts = [];
    for (let i = 0; i < args.length; i++) $push(parts, render(args[i]));
    post({ type: 'log', text: $join(parts, ' ') });
  };
  const con = $create(null);
  for (const k of ['log', 'info', 'warn', 'error', 'debug']) con[k] = (...args) => log(args);
  for (const s of [process.stdout, process.stderr]) {
    s.write = (chunk, enc, cb) => {
      post({ type: 'log', text: $String(chunk) });
      const done = typeof enc === 'function' ? enc : cb;
      if (typeof done === 'function') $queueMicrotask(() => done());
      return true;
    };
  }

  // Bindings.
  const pending = new $Map();
  let nextId = 0;
  onMessage('message', (m) => {
    const p = m && mapGet(pending, m.id);
    if (!p || m.type !== 'reply') return;
    mapDelete(pending, m.id);
    if (m.ok === true) {
      const v = decodeWire(m.value);
      if (v === undefined) p.reject(p.make('binding resolution must be lossless JSON'));
      else p.resolve(v);
    } else p.reject(p.make($String(m.message)));
  });
  const globals = []; const values = [];
  for (const ns of boot.namespaces) {
    let make = (msg) => new $Error(msg);
    const ec = ns.errorClass;
    if (ec) {
      const Cls = class extends $Error {};
      $defineProperty(Cls, 'name', { value: ec.name });
      make = (msg, member) => {
        const e = $Reflect_construct($Error, [msg], Cls);
        $defineProperty(e, 'name', { value: ec.name, enumerable: true, writable: true, configurable: true });
        $defineProperty(e, ec.memberNameProperty, { value: member, enumerable: true, writable: true, configurable: true });
        return e;
      };
      $push(globals, ec.name); $push(values, Cls);
    }
    const obj = $create(null);
    for (const name of ns.names) {
      obj[name] = async (...args) => {
        const wire = encodeWire(args);
        if (wire === undefined) throw make('binding arguments must be lossless JSON', name);
        const id = ++nextId;
        return new $Promise((resolve, reject) => {
          mapSet(pending, id, { resolve, reject, make: (msg) => make(msg, name) });
          post({ type: 'call', id, global: ns.global, name, args: wire });
        });
      };
    }
    $push(globals, ns.global); $push(values, obj);
  }

  let program;
  try {
    $push(globals, 'console');
    $push(globals, '"use strict";\n' + code);
    program = $Reflect_construct($AsyncFunction, globals);
  } catch (e) {
    post({ type: 'done', error: { kind: 'exception', message: $String((e && e.stack) || e) } });
    return;
  }
  let result;
  try {
    $push(values, con);
    result = await $apply(program, undefined, values);
  } catch (e) {
    let message;
    try {
      message = e instanceof $Error ? programStack($String(e.stack || e.message)) : $String(e);
    } catch {
      message = 'program threw an unrenderable value';
    }
    post({ type: 'done', error: { kind: 'exception', message } });
    return;
  }
  if (result === undefined) { post({ type: 'done' }); return; }
  const wire = encodeWire(result);
  if (wire === undefined) {
    post({ type: 'done', error: { kind: 'invalid-output', message: 'program completion must be lossless JSON' } });
    return;
  }
  post({ type: 'done', value: wire });
}
