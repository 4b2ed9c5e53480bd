-- POST /api/v1/integrations/messages/template with ensure_conversation: true, a unique
-- Idempotency-Key and a new phone number per request (every request creates a contact, a
-- conversation, a consent row, a message, three outbox events, an audit entry and its
-- audit.recorded event). Environment: SB_KEY (API key), SB_CHANNEL (whatsapp_cloud channel id),
-- SB_TEMPLATE (catalog template UUID whose BODY has two parameters).
local token = os.getenv("SB_KEY")
local channel = os.getenv("SB_CHANNEL")
local template = os.getenv("SB_TEMPLATE")
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("thread_id", next_id)
end

function init(args)
  counter = 0
  math.randomseed(os.time() * 1000 + thread_id)
  run = math.random(10, 99)
end

request = function()
  counter = counter + 1
  local key = string.format("init-%d-%d-%d", thread_id, counter, math.random(1, 1000000000))
  -- +49 151 and eight digits: a valid German mobile number, unique per thread and request.
  local phone = string.format("+49151%02d%d%05d", run, thread_id, counter % 100000)
  local body = '{"channel_id": ' .. channel .. ', "phone": "' .. phone .. '", "first_name": "Load",'
    .. ' "ensure_conversation": true, "template_uuid": "' .. template .. '",'
    .. ' "template": {"components": [{"type": "body", "parameters": [{"type": "text", "text": "Ada"},'
    .. ' {"type": "text", "text": "A-42"}]}]},'
    .. ' "consent": {"confirmed": true, "purpose": "utility", "source": "website_form",'
    .. ' "reference": "bench", "captured_at": "2026-01-01T00:00:00Z"}}'
  local headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key,
  }
  return wrk.format("POST", "/api/v1/integrations/messages/template", headers, body)
end
