"""A LiteLLM proxy hook for `make test-real-model` (loaded by servers.sh).

llama-cpp-python's server takes only a string as a system message's
`content` (a list of text parts is a pydantic validation error, HTTP 500),
and LiteLLM passes an Anthropic `system` given as text blocks on as such a
list. An Anthropic client may send either form; runner sends blocks (with
`cache_control`). This joins the blocks' text into one string before LiteLLM
translates the request, so /v1/messages reaches llama.cpp at all. It works
around the two servers, not runner: nothing else in the request changes.
"""

from litellm.integrations.custom_logger import CustomLogger


class SystemAsText(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        system = data.get("system")
        if isinstance(system, list):
            data["system"] = "".join(b.get("text", "") for b in system if isinstance(b, dict))
        return data


system_as_text = SystemAsText()
