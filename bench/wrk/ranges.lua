-- wrk script: GET random aligned ranges of one file.
--   WRK_SIZE   the file's size in bytes
--   WRK_RANGE  the range length in bytes (the file holds a whole number of them)
-- Each thread seeds its own generator, so threads do not ask for the same
-- sequence of ranges.
local size = tonumber(os.getenv("WRK_SIZE"))
local rlen = tonumber(os.getenv("WRK_RANGE"))
assert(size and rlen and rlen > 0 and size >= rlen, "set WRK_SIZE and WRK_RANGE")
local blocks = math.floor(size / rlen)
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("seed", counter)
end

function init(args)
  math.randomseed(os.time() * 1000 + (seed or 0))
end

function request()
  local s = math.random(0, blocks - 1) * rlen
  return wrk.format("GET", nil, { ["Range"] = "bytes=" .. s .. "-" .. (s + rlen - 1) })
end
