"""The chat loop of a verifiers task's episode (``verifiers_agent.py``, choices 1-3): the task's
toolsets served in process, and a ``Conversation`` whose ``segment`` runs model turns, each tool
call answered, until a reply without one, a stop or the turn limit."""

from __future__ import annotations

import json
from typing import Any


def tool_servers(task, taskset) -> list:
    """The toolsets an episode of ``task`` gets (choice 2): the task's own, then the
    taskset's shared ones."""
    return [*type(task).toolsets(task.config), *type(taskset).toolsets(taskset.config)]


class Tools:
    """One episode's toolsets, served in process (choice 2)."""

    def __init__(self, servers: list):
        self.servers = servers
        self.schemas: list[dict] = []
        self.dispatch: dict[str, tuple[Any, str]] = {}  # full name -> (MCP server, tool name)

    async def open(self, task) -> Tools:
        from mcp.server.mcpserver import MCPServer

        for server in self.servers:
            mcp = MCPServer(server.server_name or "tools")
            server.register(mcp)
            await server.setup()
            await server.setup_task(task)
            for tool in await mcp.list_tools():
                name = f"{server.server_name}_{tool.name}" if server.server_name else tool.name
                if name in self.dispatch:
                    raise ValueError(f"two tools are called {name!r}; keep tool names "
                                     "qualified (TOOL_PREFIX)")
                self.dispatch[name] = (mcp, tool.name)
                self.schemas.append({"type": "function", "function": {
                    "name": name, "description": tool.description or "",
                    "parameters": tool.input_schema}})
        return self

    async def call(self, name: str, arguments: str) -> str:
        """The tool message's content for one call; mistakes are answered (choice 2)."""
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as err:
            return (f"error: invalid JSON in tool arguments ({err}); resend the call with "
                    "valid JSON")
        if not isinstance(args, dict):
            return (f"error: tool arguments must be a JSON object, got {type(args).__name__}; "
                    "resend as an object")
        if name not in self.dispatch:
            return f"error: unknown tool {name!r}"
        mcp, raw = self.dispatch[name]
        from mcp.server.mcpserver.exceptions import ToolError

        try:
            result = await mcp.call_tool(raw, args)
        except ToolError as err:  # what MCP's server answers as an error result
            return str(err)
        from verifiers.v1.harnesses.utils.mcp import mcp_content_to_chat_content

        content = mcp_content_to_chat_content(result.content)
        return content if isinstance(content, str) else json.dumps(content)


class Conversation:
    """One conversation of an episode: its messages, its verifiers trace, the task's tools and
    stops; ``segment`` runs model turns until a reply without a tool call (choices 1-3)."""

    def __init__(self, owner, client, task, messages: list, tools: Tools):
        import verifiers.v1 as vf

        self.owner, self.client, self.tools = owner, client, tools
        self.messages = messages
        self.stops = task.hooks("stop")
        self.trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data),
                              agent=owner.vf_rows.agent_info, nodes=[])
        for m in messages:
            self.add(m)

    @classmethod
    async def open(cls, owner, client, task, messages: list) -> Conversation:
        tools = await Tools(tool_servers(task, owner.taskset)).open(task)
        return cls(owner, client, task, messages, tools)

    def add(self, message, sampled: bool = False) -> None:
        """A message onto the trace (a wire dict or a verifiers message)."""
        import verifiers.v1 as vf

        parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
        self.trace.nodes.append(vf.MessageNode(parent=parent, message=message, sampled=sampled))

    async def segment(self) -> None:
        """Model turns, each tool call answered, until a reply without one or a stop."""
        import verifiers.v1 as vf

        while not await self.owner.stopped(self.trace, self.stops):
            reply = await self.client.chat.completions.create(
                messages=self.messages, tools=self.tools.schemas or None)
            message = reply.choices[0].message
            self.messages.append(message)
            calls = message.tool_calls or []
            self.add(vf.AssistantMessage(content=message.content, tool_calls=[
                vf.ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in calls] or None), sampled=True)
            if not calls:
                return
            for call in calls:
                content = await self.tools.call(call.function.name, call.function.arguments)
                tool_message = {"role": "tool", "tool_call_id": call.id,
                                "name": call.function.name, "content": content}
                self.messages.append(tool_message)
                self.add(vf.ToolMessage(**tool_message))
