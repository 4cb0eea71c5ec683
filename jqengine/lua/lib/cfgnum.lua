-- A numeric field of the queue's configuration, `default` when it has none or it is no number.
-- uses: cfg
local function cfgnum(field, default)
  return tonumber(cfg(field, default)) or default
end
