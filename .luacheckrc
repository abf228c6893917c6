-- luacheck's settings for the Redis scripts in agents_celery/storage/lua/ (Lua 5.1 as Redis embeds it).
-- `make lint` runs scripts/lint-lua: it lints each script as Redis runs it, with its `-- @include _name.lua`
-- lines expanded (storage/scripts.py:source), and maps every finding back to the file and line it comes from.
std = "lua51"
max_line_length = 120
-- What Redis gives a script: a script may define no global of its own (Redis refuses that at run time).
read_globals = {"redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct"}

-- For a direct `luacheck agents_celery/storage/lua` of the files as they are: the local functions the
-- helpers define are the includers' names (expanded, they are locals and need no declaring), and a helper's
-- function is unused in its own file.
files["agents_celery/storage/lua/*.lua"] = {read_globals = {"append", "guard", "expire_run"}}
files["agents_celery/storage/lua/_*.lua"] = {ignore = {"211"}}
