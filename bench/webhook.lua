-- wrk script for bench/run.sh: 1024-byte JSON webhooks shaped like the
-- bench source's selectors (request_id, data.id, data.version).
--
--   wrk ... -s bench/webhook.lua URL -- MODE [SENT_BY_THREAD...]
--
-- MODE
--   accept   new request IDs a-<thread>-<n>; resource r-<thread>-<n mod 1000>
--            at version n, so versions only grow per resource (a resource
--            comes back every 1000 requests of its thread, never while the
--            previous one is in flight with 32 connections per thread)
--   dup      the accept phase's request IDs again (same payload, another
--            sent_at, which the fingerprint excludes): all duplicates.
--            Needs the accept phase's per-thread counts as arguments.
--   mixed    new request IDs m-<thread>-<n>; every 4th is stale (version 0
--            of a resource the accept phase created), the rest are newer
--            versions (1e9 + n) of the same resources
--   backlog  like accept, with request IDs b-<thread>-<n> and resources
--            q-<thread>-<n mod 1000>: new work while the downstream holds
--            forwarding, to build an outbox backlog. An optional second
--            argument, a run number K > 0 (bench/backlog.sh's interval),
--            makes the request IDs b-K-<thread>-<n> and the versions
--            K * 1e9 + n: the same 1000 resources per thread in every run,
--            their versions growing from one run to the next
--   random   like accept, with request IDs that begin with 16 random hex
--            digits, <hex>-<thread>-<n>, as a provider's UUIDs would: in
--            no order, where accept's IDs sort close to the ones before
--   ceiling  the accept body shape, for the bare Fiber endpoint
--
-- accept and random take an optional second argument, a prefix for their
-- request IDs and resources, so that several wrk processes (one per
-- replica, or one per interval of bench/growth.sh) send different ones.
--
-- wrk calls request() once on the first thread before the run, to check it,
-- and sends nothing for it: thread 1's first ID of each phase (a-1-1,
-- m-1-1) never reaches the server, so the dup phase cycles from ID 2 on.
--
-- The padding is taken from a per-thread pool of random hex, seeded by the
-- thread ID (the same in every phase, so a dup body equals its accept body
-- but for sent_at): bodies do not compress, and bytes on disk per receipt
-- are not flattered by Badger's block compression.
--
-- done() prints one "BENCH ..." line and one "BENCH_THREAD ..." line per
-- thread for run.sh to parse. Thread IDs come from setup(), so request IDs
-- never repeat across threads.

local threads = {}

function setup(thread)
   table.insert(threads, thread)
   thread:set("tid", #threads)
   thread:set("n", 0)
end

local mode, limit, pool
local prefix = ""
local run, base = "", 0
local POOL = 65536
local headers = { ["Content-Type"] = "application/json" }

function init(args)
   mode = args[1] or "accept"
   if (mode == "accept" or mode == "random") and args[2] then prefix = args[2] .. "-" end
   if mode == "backlog" and args[2] then
      run, base = args[2] .. "-", tonumber(args[2]) * 1000000000
   end
   math.randomseed(tid)
   local hex, chars = "0123456789abcdef", {}
   for i = 1, POOL do
      local d = math.random(16)
      chars[i] = hex:sub(d, d)
   end
   pool = table.concat(chars)
   if mode == "dup" then
      -- Leave out the last requests the accept phase sent: they may have
      -- been cut off in flight and so never accepted.
      limit = tonumber(args[1 + tid]) - 64
      if limit < 1 then error("dup: too few accepted requests for thread " .. tid) end
   end
end

local function body(i, request_id, sent_at, resource, version)
   local head = string.format(
      '{"request_id":"%s","sent_at":"%s","type":"subscription.updated","data":{"id":"%s","version":%d,"note":"',
      request_id, sent_at, resource, version)
   -- Pad to exactly 1024 bytes with the closing '"}}', from a place in the
   -- pool that depends on i only.
   local at = (i * 7919) % (POOL - 1024) + 1
   return head .. pool:sub(at, at + 1024 - #head - 3 - 1) .. '"}}'
end

function request()
   n = n + 1
   local b
   if mode == "accept" or mode == "ceiling" then
      b = body(n, string.format("a-%s%d-%d", prefix, tid, n), "2026-01-01T00:00:00Z", string.format("r-%s%d-%d", prefix, tid, n % 1000), n)
   elseif mode == "random" then
      local id = string.format("%08x%08x-%s%d-%d", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff), prefix, tid, n)
      b = body(n, id, "2026-01-01T00:00:00Z", string.format("r-%s%d-%d", prefix, tid, n % 1000), n)
   elseif mode == "backlog" then
      b = body(n, string.format("b-%s%d-%d", run, tid, n), "2026-01-01T00:15:00Z", string.format("q-%d-%d", tid, n % 1000), base + n)
   elseif mode == "dup" then
      local i = (n - 1) % limit + 2
      b = body(i, string.format("a-%d-%d", tid, i), "2026-01-01T00:05:00Z", string.format("r-%d-%d", tid, i % 1000), i)
   elseif mode == "mixed" then
      local version = 1000000000 + n
      if n % 4 == 0 then version = 0 end
      b = body(n, string.format("m-%d-%d", tid, n), "2026-01-01T00:10:00Z", string.format("r-%d-%d", tid, n % 1000), version)
   else
      error("unknown mode " .. mode)
   end
   headers["X-Delivery-Id"] = string.format("%s-%d-%d", mode, tid, n)
   return wrk.format("POST", nil, headers, b)
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "BENCH requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx3xx=%d connect=%d read=%d write=%d timeout=%d\n",
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency.max, e.status, e.connect, e.read, e.write, e.timeout))
   for _, t in ipairs(threads) do
      io.write(string.format("BENCH_THREAD tid=%d sent=%d\n", t:get("tid"), t:get("n")))
   end
end
