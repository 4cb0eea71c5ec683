-- The first kill switch that matches job `key` of `kind`, or nil.
-- Kill switches (jqengine.switches): the queue's config field 'switches' holds a JSON array of
-- {name, action = 'park' | 'dead', kind = '' (any) | kind, meta = {key = value, ...}}, written by the
-- switch admin calls. A claim meets each ready job through switched(): the first switch matching the job's
-- kind and every meta pair wins. Decoded at most once per script call; a job's envelope is decoded only
-- when a switch names meta pairs.
-- uses: cfg
local switch_list = nil
local function switched(key, kind)
  if switch_list == nil then
    local raw = cfg('switches', '')
    switch_list = (raw ~= '') and cjson.decode(raw) or {}
  end
  if #switch_list == 0 then return nil end
  local meta = nil
  for _, s in ipairs(switch_list) do
    if s.kind == '' or s.kind == kind then
      local hit = true
      if next(s.meta) ~= nil then
        if meta == nil then
          local env = cjson.decode(redis.call('HGET', key, 'env'))
          meta = type(env.meta) == 'table' and env.meta or {}
        end
        for mk, mv in pairs(s.meta) do
          if meta[mk] ~= mv then hit = false break end
        end
      end
      if hit then return s end
    end
  end
  return nil
end
