//! The Lua scripts that make each store operation one atomic step in Redis.
//!
//! Appending assigns the sequence number by `HINCRBY` inside the script, which also folds the
//! event into the snapshot, adds it to the capped history stream and publishes it: every
//! replica sees one order, and history and live delivery never disagree. Each script touches
//! the keys of one hash slot (a Redis Cluster runs nothing else): a job's event reaches its
//! correlation by a second script, which a job's mark in the correlation makes idempotent.
//!
//! Lua never parses JSON here (cjson would turn `[]` into `{}` and round numbers to 14
//! digits): the bridge renders each event's JSON once, split around its `seq` value, and the
//! script concatenates the number in. Snapshot fields are JSON text per hash field.

use ::redis::Script;

/// KEYS: job hash, job events. ARGV: live TTL ms, field/value…
/// Returns 0 when the job exists already, else 1; an error, having written nothing, when a key
/// holds a value of another type (all-or-nothing: Redis does not undo a script's writes when a
/// later command fails, so every key is checked before the first write). Every key it writes
/// gets the live TTL, which the owner renews while the job runs. The owner's `running` set and
/// the correlation are written by the caller, each in its own slot (see `CORR_START`).
const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local want = {'hash', 'none'}
for i = 1, #KEYS do
  local found = redis.call('TYPE', KEYS[i])['ok']
  if found ~= 'none' and found ~= want[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. found .. ', not a ' .. want[i] .. '; nothing was written')
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"#;

/// KEYS: corr hash, corr events, corr jobs. ARGV: job id, history, corr channel, job_started
/// data, corr job cap, live TTL ms.
/// A job joins its correlation: `job_started` numbered in the correlation's line, the job
/// counted as running, and its mark `j:<job id>` set to 0: the job seq copied last (see
/// `CORR_COPY`). Returns 0 (writing nothing) when the mark exists already (a retry), else 1;
/// an error, having written nothing, when a key holds a value of another type.
const CORR_START: &str = r#"
local want = {'hash', 'stream', 'list'}
for i = 1, #KEYS do
  local found = redis.call('TYPE', KEYS[i])['ok']
  if found ~= 'none' and found ~= want[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. found .. ', not a ' .. want[i] .. '; nothing was written')
  end
end
local mark = 'j:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], mark) == 1 then return 0 end
local ttl = ARGV[6]
local cseq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HINCRBY', KEYS[1], 'running', 1)
redis.call('HSET', KEYS[1], mark, 0)
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[5]), -1)
local frame = 'id: ' .. cseq .. '\nevent: job_started\ndata: ' .. ARGV[4] .. '\n\n'
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], cseq .. '-0', 'f', frame)
redis.call('PUBLISH', ARGV[3], frame)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return 1
"#;

/// KEYS: job hash, job events.
/// ARGV: kind, data before seq, data after seq, terminal (1/0), history, retention ms, job
/// channel, expected seq (0: any), live TTL ms, writer's owner (JSON text; '' for a write that
/// is not fenced), writer's generation, field/value…
/// Returns {seq, 0} when stored; {0, 0} unknown job; {-1, 0} job already ended;
/// {-2, head} when the expected seq is already stored (a retried write that had succeeded);
/// {-3, generation} when the job's owner or generation is no longer the writer's (another
/// replica adopted it: the fence, checked before the status, so that an old owner learns the
/// job is another's, not that it ended). A job written before generations has generation 0.
/// The job's keys only: its correlation's copy is `CORR_COPY`, in the correlation's slot.
const APPEND: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0, 0} end
if ARGV[10] ~= '' then
  local gen = redis.call('HGET', KEYS[1], '_gen') or '0'
  if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[10] or gen ~= ARGV[11] then
    return {-3, tonumber(gen)}
  end
end
if status ~= '"running"' and status ~= '"input_required"' then return {-1, 0} end
local expect = tonumber(ARGV[8])
if expect > 0 then
  local head = tonumber(redis.call('HGET', KEYS[1], 'seq'))
  if head >= expect then return {-2, head} end
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
if #ARGV > 11 then redis.call('HSET', KEYS[1], unpack(ARGV, 12)) end
local data = ARGV[2] .. seq .. ARGV[3]
local frame = 'id: ' .. seq .. '\nevent: ' .. ARGV[1] .. '\ndata: ' .. data .. '\n\n'
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], seq .. '-0', 'f', frame)
if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIRE', KEYS[2], ARGV[9]) end
redis.call('PUBLISH', ARGV[7], frame)
if ARGV[4] == '1' then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return {seq, 0}
"#;

/// KEYS: corr hash, corr events, corr jobs. ARGV: job id, job seq, kind, data (its `seq`
/// filled in), terminal (1/0), history, retention ms, corr channel.
/// Copies one stored job event into the correlation's line, once: the job's mark `j:<job id>`
/// holds the job seq copied last, so a retry (the owner does not know whether its last try
/// ran) copies nothing. A job without a mark never joined the correlation (its `CORR_START`
/// did not run) or has ended: nothing is copied. The terminal event takes the mark away and
/// the job off the running count; the last running job's end starts the retention.
/// Returns the correlation seq, or 0 when nothing was copied.
const CORR_COPY: &str = r#"
local mark = 'j:' .. ARGV[1]
local done = redis.call('HGET', KEYS[1], mark)
if not done or tonumber(done) >= tonumber(ARGV[2]) then return 0 end
local cseq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local frame = 'id: ' .. cseq .. '\nevent: ' .. ARGV[3] .. '\ndata: ' .. ARGV[4] .. '\n\n'
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[6], cseq .. '-0', 'f', frame)
redis.call('PUBLISH', ARGV[8], frame)
if ARGV[5] == '1' then
  redis.call('HDEL', KEYS[1], mark)
  if redis.call('HINCRBY', KEYS[1], 'running', -1) <= 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    redis.call('PEXPIRE', KEYS[2], ARGV[7])
    redis.call('PEXPIRE', KEYS[3], ARGV[7])
  end
else
  redis.call('HSET', KEYS[1], mark, ARGV[2])
end
return cseq
"#;

/// KEYS: job hash. ARGV: writer's owner (JSON text), writer's generation, re-attach record
/// (JSON), durability (JSON text).
/// Keeps the record (`_reattach`) and shows the durability on the running job, if the writer is
/// still its owner. Returns 1 when kept, 0 when the job is unknown or ended, -3 when fenced.
const RECORD_REATTACH: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"running"' and status ~= '"input_required"' then return 0 end
local gen = redis.call('HGET', KEYS[1], '_gen') or '0'
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or gen ~= ARGV[2] then return -3 end
redis.call('HSET', KEYS[1], '_reattach', ARGV[3], 'durability', ARGV[4])
return 1
"#;

/// KEYS: job hash. ARGV: its draining owner (JSON text), its generation.
/// The offer of a hand-over: marks the running job `_offered` by its owner, if the writer still
/// owns it at that generation, so that only this owner's offer can be claimed (`ADOPT`). Returns
/// 1 when marked, 0 when the job is unknown or ended, -3 when fenced.
const OFFER: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"running"' and status ~= '"input_required"' then return 0 end
local gen = redis.call('HGET', KEYS[1], '_gen') or '0'
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or gen ~= ARGV[2] then return -3 end
redis.call('HSET', KEYS[1], '_offered', ARGV[1])
return 1
"#;

/// KEYS: job hash. ARGV: lost owner (JSON text), its generation, adopter (JSON text), live
/// TTL ms, '1' for a hand-over ('0': a lapsed lease).
/// The claim of adoption: the job passes to the adopter, generation + 1, if it still runs, is
/// still the lost owner's at that generation, has a re-attach record and, for a hand-over, was
/// offered by that owner (`OFFER`: an offer seen after another replica took the job is stale).
/// Of several replicas claiming at once exactly one gets it. Returns {generation, snapshot
/// fields} when claimed, {0} otherwise. The `running` sets, each in a slot of its own, are the
/// caller's to move.
const ADOPT: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"running"' and status ~= '"input_required"' then return {0} end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return {0} end
local gen = tonumber(redis.call('HGET', KEYS[1], '_gen') or '0')
if gen ~= tonumber(ARGV[2]) then return {0} end
if not redis.call('HGET', KEYS[1], '_reattach') then return {0} end
if ARGV[5] == '1' and redis.call('HGET', KEYS[1], '_offered') ~= ARGV[1] then return {0} end
redis.call('HDEL', KEYS[1], '_offered')
redis.call('HSET', KEYS[1], 'owner', ARGV[3], '_gen', gen + 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {gen + 1, redis.call('HGETALL', KEYS[1])}
"#;

/// KEYS: job hash. ARGV: data before seq, data after seq, job channel, owner (JSON text),
/// generation.
/// Publishes a live-only heartbeat at the current position, if the job is still the owner's at
/// that generation (else -3, the fence); nothing is stored. Returns the job's seq, -1 when it
/// is unknown or ended.
const HEARTBEAT: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"running"' and status ~= '"input_required"' then return -1 end
local gen = redis.call('HGET', KEYS[1], '_gen') or '0'
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[4] or gen ~= ARGV[5] then return -3 end
local seq = redis.call('HGET', KEYS[1], 'seq')
local data = ARGV[1] .. seq .. ARGV[2]
redis.call('PUBLISH', ARGV[3], 'id: ' .. seq .. '\nevent: heartbeat\ndata: ' .. data .. '\n\n')
return tonumber(seq)
"#;

/// KEYS: corr hash. ARGV: data (the job's seq filled in), corr channel.
/// The job heartbeat on its correlation's channel, at the correlation's current position.
const CORR_HEARTBEAT: &str = r#"
local cseq = redis.call('HGET', KEYS[1], 'seq') or '0'
redis.call('PUBLISH', ARGV[2], 'id: ' .. cseq .. '\nevent: heartbeat\ndata: ' .. ARGV[1] .. '\n\n')
return 1
"#;

/// KEYS: job hash, job events. ARGV: first seq wanted.
/// Returns nil for an unknown job, else {snapshot fields, oldest entry, entries from ARGV[1]}.
const OPEN_JOB: &str = r#"
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return false end
local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
local entries = redis.call('XRANGE', KEYS[2], ARGV[1], '+')
return {fields, oldest, entries}
"#;

/// KEYS: corr hash, corr events, corr jobs. ARGV: first seq wanted.
/// Returns {head, job ids, oldest entry, entries}. A correlation with no job yet is empty at
/// head 0 (an application subscribes before it calls the agent); reading it writes nothing.
const OPEN_CORRELATION: &str = r#"
local head = redis.call('HGET', KEYS[1], 'seq') or '0'
local jobs = redis.call('LRANGE', KEYS[3], 0, -1)
local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
local entries = redis.call('XRANGE', KEYS[2], ARGV[1], '+')
return {head, jobs, oldest, entries}
"#;

/// KEYS: job hash. ARGV: control channel prefix (`<prefix>:v3:control:{`), message.
/// Records the request on the job (so an owner that was disconnected finds it) and publishes
/// it on the owner's control channel. Returns the snapshot fields as before, nil if unknown.
const REQUEST_CANCEL: &str = r#"
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return false end
local status = redis.call('HGET', KEYS[1], 'status')
if status == '"running"' or status == '"input_required"' then
  redis.call('HSET', KEYS[1], '_cancel', ARGV[2])
  local owner = string.sub(redis.call('HGET', KEYS[1], 'owner'), 2, -2)
  redis.call('PUBLISH', ARGV[1] .. owner .. '}', ARGV[2])
end
return fields
"#;

/// KEYS: a principal's task index (sorted set). ARGV: score (creation ms), task ID, cap,
/// TTL ms. Adds the task, forgets the oldest past the cap, renews the TTL; returns how many
/// were forgotten.
const LIST_TASK: &str = r#"
local found = redis.call('TYPE', KEYS[1])['ok']
if found ~= 'none' and found ~= 'zset' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. found .. ', not a zset; nothing was written')
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
local forgot = redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[3]) + 1))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return forgot
"#;

/// KEYS: a principal's task index. ARGV: the task after which the page starts ('' for the
/// first page), page size. Returns the page, newest first; nil when that task is not listed.
/// One script, so a task added meanwhile cannot shift the page under the cursor.
const LISTED_TASKS: &str = r#"
local start = 0
if ARGV[1] ~= '' then
  local rank = redis.call('ZREVRANK', KEYS[1], ARGV[1])
  if not rank then return false end
  start = rank + 1
end
return redis.call('ZREVRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
"#;

/// The scripts, hashed once (`EVALSHA`; the crate loads a script again after a Redis restart
/// emptied its script cache).
pub(super) struct Scripts {
    pub create: Script,
    pub corr_start: Script,
    pub append: Script,
    pub corr_copy: Script,
    pub record_reattach: Script,
    pub offer: Script,
    pub adopt: Script,
    pub heartbeat: Script,
    pub corr_heartbeat: Script,
    pub open_job: Script,
    pub open_correlation: Script,
    pub request_cancel: Script,
    pub list_task: Script,
    pub listed_tasks: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            create: Script::new(CREATE),
            corr_start: Script::new(CORR_START),
            append: Script::new(APPEND),
            corr_copy: Script::new(CORR_COPY),
            record_reattach: Script::new(RECORD_REATTACH),
            offer: Script::new(OFFER),
            adopt: Script::new(ADOPT),
            heartbeat: Script::new(HEARTBEAT),
            corr_heartbeat: Script::new(CORR_HEARTBEAT),
            open_job: Script::new(OPEN_JOB),
            open_correlation: Script::new(OPEN_CORRELATION),
            request_cancel: Script::new(REQUEST_CANCEL),
            list_task: Script::new(LIST_TASK),
            listed_tasks: Script::new(LISTED_TASKS),
        }
    }
}
