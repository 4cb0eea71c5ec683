-- The job id of node `name`'s current run: <graph id>:<name>, with @<gen> once a graph retry ran it again.
-- uses: gfield
local function node_job(name)
  local gen = tonumber(redis.call('HGET', GEN, name) or '0')
  local id = gfield('id') .. ':' .. name
  if gen > 0 then id = id .. '@' .. gen end
  return id
end
