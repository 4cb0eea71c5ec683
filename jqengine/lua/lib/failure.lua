-- The event fields of a failed attempt: error class, digest and message from the worker's text (a
-- traceback ends with "Class: message"; "Retry: why" and plain text work too).
-- uses: none
local function failure(text)
  local last = ''
  for line in string.gmatch(text or '', '[^\n]+') do
    if string.find(line, '%S') then last = line end
  end
  last = string.gsub(last, '^%s+', '')
  local cls, msg = string.match(last, '^([%a_][%w_%.]*):%s*(.*)$')
  if cls == nil then
    if string.match(last, '^[%a_][%w_%.]*$') then cls, msg = last, '' else cls, msg = '', last end
  end
  return {error = cls, digest = string.sub(redis.sha1hex(cls .. ': ' .. msg), 1, 12),
          message = string.sub(msg, 1, 200)}
end
