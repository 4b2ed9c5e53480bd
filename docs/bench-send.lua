-- POST /api/v1/integrations/messages with a unique Idempotency-Key per request.
local token = os.getenv("SB_KEY")
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("thread_id", next_id)
end

function init(args)
  counter = 0
  math.randomseed(os.time() * 1000 + thread_id)
end

request = function()
  counter = counter + 1
  local key = string.format("bench-%d-%d-%d", thread_id, counter, math.random(1, 1000000000))
  local phone = string.format("+491512345%04d", math.random(0, 99))
  local body = '{"phone": "' .. phone .. '", "message": "load test message"}'
  local headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key,
  }
  return wrk.format("POST", "/api/v1/integrations/messages", headers, body)
end
