//! The Lua scripts that make each store operation one atomic step in Redis.
//!
//! Appending is the one that matters: the sequence number is assigned by `HINCRBY` inside the
//! script, and the same script folds the event into the snapshot, adds it to the capped
//! history stream and publishes it. So every replica sees one order, history and live delivery
//! never disagree, and a reader may resume from any replica.
//!
//! Lua never parses JSON here (Redis' cjson would turn an empty array into `{}` and round
//! numbers to 14 digits). The bridge renders each event's JSON once, split around its `seq`
//! value; the script only concatenates the number in. Snapshot fields are stored as JSON text
//! per hash field, and the bridge sends the fields an event changes.

use ::redis::Script;

/// KEYS: job hash, job events, owner's running set, replicas set, [corr hash, corr events,
/// corr jobs]. ARGV: job id, owner, history, corr channel, job_started data, corr job cap,
/// live TTL ms, field/value…
/// Returns 0 when the job exists already, else 1; an error, having written nothing, when a key
/// holds a value of another type (all-or-nothing: Redis does not undo a script's writes when a
/// later command fails, so every key is checked before the first write). Every key it writes
/// gets the live TTL, which the owner renews while the job runs.
const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local want = {'hash', 'none', 'set', 'set', 'hash', 'stream', 'list'}
for i = 1, #KEYS do
  local found = redis.call('TYPE', KEYS[i])['ok']
  if found ~= 'none' and found ~= want[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. found .. ', not a ' .. want[i] .. '; nothing was written')
  end
end
local ttl = ARGV[7]
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('PEXPIRE', KEYS[4], ttl)
if #KEYS == 7 then
  local cseq = redis.call('HINCRBY', KEYS[5], 'seq', 1)
  redis.call('HINCRBY', KEYS[5], 'running', 1)
  redis.call('RPUSH', KEYS[7], ARGV[1])
  redis.call('LTRIM', KEYS[7], -tonumber(ARGV[6]), -1)
  local frame = 'id: ' .. cseq .. '\nevent: job_started\ndata: ' .. ARGV[5] .. '\n\n'
  redis.call('XADD', KEYS[6], 'MAXLEN', ARGV[3], cseq .. '-0', 'f', frame)
  redis.call('PUBLISH', ARGV[4], frame)
  redis.call('PEXPIRE', KEYS[5], ttl)
  redis.call('PEXPIRE', KEYS[6], ttl)
  redis.call('PEXPIRE', KEYS[7], ttl)
end
return 1
"#;

/// KEYS: job hash, job events, owner's running set, [corr hash, corr events, corr jobs].
/// ARGV: job id, kind, data before seq, data after seq, terminal (1/0), history, retention ms,
/// job channel, corr channel, expected seq (0: any), live TTL ms, writer's owner (JSON text;
/// '' for a write that is not fenced), writer's generation, field/value…
/// Returns {seq, 0} when stored; {0, 0} unknown job; {-1, 0} job already ended;
/// {-2, head} when the expected seq is already stored (a retried write that had succeeded);
/// {-3, generation} when the job's owner or generation is no longer the writer's (another
/// replica adopted it: the fence). A job written before generations has generation 0.
const APPEND: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0, 0} end
if status ~= '"running"' and status ~= '"input_required"' then return {-1, 0} end
if ARGV[12] ~= '' then
  local gen = redis.call('HGET', KEYS[1], '_gen') or '0'
  if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[12] or gen ~= ARGV[13] then
    return {-3, tonumber(gen)}
  end
end
local expect = tonumber(ARGV[10])
if expect > 0 then
  local head = tonumber(redis.call('HGET', KEYS[1], 'seq'))
  if head >= expect then return {-2, head} end
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
if #ARGV > 13 then redis.call('HSET', KEYS[1], unpack(ARGV, 14)) end
local data = ARGV[3] .. seq .. ARGV[4]
local frame = 'id: ' .. seq .. '\nevent: ' .. ARGV[2] .. '\ndata: ' .. data .. '\n\n'
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[6], seq .. '-0', 'f', frame)
if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIRE', KEYS[2], ARGV[11]) end
redis.call('PUBLISH', ARGV[8], frame)
local terminal = ARGV[5] == '1'
if #KEYS == 6 then
  local cseq = redis.call('HINCRBY', KEYS[4], 'seq', 1)
  local cframe = 'id: ' .. cseq .. '\nevent: ' .. ARGV[2] .. '\ndata: ' .. data .. '\n\n'
  redis.call('XADD', KEYS[5], 'MAXLEN', ARGV[6], cseq .. '-0', 'f', cframe)
  redis.call('PUBLISH', ARGV[9], cframe)
  if terminal and redis.call('HINCRBY', KEYS[4], 'running', -1) <= 0 then
    redis.call('PEXPIRE', KEYS[4], ARGV[7])
    redis.call('PEXPIRE', KEYS[5], ARGV[7])
    redis.call('PEXPIRE', KEYS[6], ARGV[7])
  end
end
if terminal then
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
  redis.call('SREM', KEYS[3], ARGV[1])
end
return {seq, 0}
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

/// KEYS: job hash, the lost owner's running set, the adopter's running set, replicas set.
/// ARGV: job id, lost owner (JSON text), its generation, adopter (JSON text), adopter's name,
/// live TTL ms.
/// The claim of adoption: the job passes to the adopter, generation + 1, if it still runs, is
/// still the lost owner's at that generation, and has a re-attach record. Of several replicas
/// claiming at once exactly one gets it. Returns {generation, snapshot fields} when claimed,
/// {0} otherwise.
const ADOPT: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"running"' and status ~= '"input_required"' then return {0} end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[2] then return {0} end
local gen = tonumber(redis.call('HGET', KEYS[1], '_gen') or '0')
if gen ~= tonumber(ARGV[3]) then return {0} end
if not redis.call('HGET', KEYS[1], '_reattach') then return {0} end
redis.call('HSET', KEYS[1], 'owner', ARGV[4], '_gen', gen + 1)
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
redis.call('SADD', KEYS[4], ARGV[5])
return {gen + 1, redis.call('HGETALL', KEYS[1])}
"#;

/// KEYS: job hash, [corr hash]. ARGV: data before seq, data after seq, job channel, corr channel,
/// owner (JSON text), generation.
/// Publishes a live-only heartbeat at the current position, if the job is still the owner's at
/// that generation (else -3, the fence); nothing is stored.
const HEARTBEAT: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= '"running"' and status ~= '"input_required"' then return 0 end
local gen = redis.call('HGET', KEYS[1], '_gen') or '0'
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[5] or gen ~= ARGV[6] then return -3 end
local seq = redis.call('HGET', KEYS[1], 'seq')
local data = ARGV[1] .. seq .. ARGV[2]
redis.call('PUBLISH', ARGV[3], 'id: ' .. seq .. '\nevent: heartbeat\ndata: ' .. data .. '\n\n')
if #KEYS == 2 then
  local cseq = redis.call('HGET', KEYS[2], 'seq') or '0'
  redis.call('PUBLISH', ARGV[4], 'id: ' .. cseq .. '\nevent: heartbeat\ndata: ' .. data .. '\n\n')
end
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

/// KEYS: job hash. ARGV: control channel prefix (`<prefix>:v2:control:{`), message.
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
    pub append: Script,
    pub record_reattach: Script,
    pub adopt: Script,
    pub heartbeat: Script,
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
            append: Script::new(APPEND),
            record_reattach: Script::new(RECORD_REATTACH),
            adopt: Script::new(ADOPT),
            heartbeat: Script::new(HEARTBEAT),
            open_job: Script::new(OPEN_JOB),
            open_correlation: Script::new(OPEN_CORRELATION),
            request_cancel: Script::new(REQUEST_CANCEL),
            list_task: Script::new(LIST_TASK),
            listed_tasks: Script::new(LISTED_TASKS),
        }
    }
}
