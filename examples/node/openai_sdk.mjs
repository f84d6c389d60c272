// The official `openai` Node SDK against `make dev` (npm install openai, then
// node openai_sdk.mjs): plain, streamed, tools, structured output.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.GATEWAY_BASE_URL ?? "http://127.0.0.1:8080/v1",
  apiKey: process.env.GATEWAY_KEY ?? "gw-dev-key",
});

const reply = await client.chat.completions.create({
  model: "auto",
  messages: [{ role: "user", content: "Hello" }],
});
console.log("plain", reply.model, reply.choices[0].message.content);

let streamed = "";
const stream = await client.chat.completions.create({
  model: "auto",
  messages: [{ role: "user", content: "Count to five" }],
  stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
console.log("stream", streamed.length > 0);

const called = await client.chat.completions.create({
  model: "auto",
  messages: [{ role: "user", content: "What is the weather in Paris?" }],
  tools: [{
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  }],
});
console.log("tools", called.choices[0].message.tool_calls?.[0]?.function?.name);

const structured = await client.chat.completions.create({
  model: "auto",
  messages: [{ role: "user", content: "Describe a mug." }],
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "mug",
      strict: true,
      schema: {
        type: "object",
        additionalProperties: false,
        required: ["name", "price_usd"],
        properties: { name: { type: "string" }, price_usd: { type: "number" } },
      },
    },
  },
});
console.log("structured", JSON.stringify(JSON.parse(structured.choices[0].message.content)));
