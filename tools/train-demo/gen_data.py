"""Synthetic customer-service conversations for the demo model.

Seeded and deterministic.  Each conversation is an OpenAI-style message
list for the fictional shop "Acme Shop": order status (through the
lookup_order tool), refunds (lookup_order, then issue_refund), returns
policy, sizing, shipping times, greetings, a missing order number, and
polite refusals for anything out of scope.  Tool calls use OpenAI's shape
(arguments as a JSON string); the chat template renders them Hermes-style.

    gen_data.py --seed 1 --n 20000 -o train.jsonl
    gen_data.py --eval --seed 777 --n 20 -o eval.jsonl
"""

import argparse
import json
import random
import re

SYSTEM = "You are the support assistant of Acme Shop."

TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_order",
        "description": "Look up an order by its number.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string", "description": "The order number"}},
            "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "issue_refund",
        "description": "Refund an order, fully or partly.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string"},
            "amount_cents": {"type": "integer"},
            "reason": {"type": "string"}},
            "required": ["order_id", "amount_cents", "reason"]}}},
]

ITEMS = ["running shoes", "rain jacket", "wool sweater", "denim jeans",
         "leather belt", "cotton t-shirt", "hiking boots", "winter coat",
         "baseball cap", "summer dress", "sports socks", "backpack"]
CARRIERS = ["UPS", "FedEx", "DHL", "USPS"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]

STATUS_Q = [
    "Where is my order {id}?",
    "Can you check the status of order {id}?",
    "Hi, what's happening with my order {id}?",
    "Has order {id} shipped yet?",
    "I ordered something last week, order number {id}. When will it arrive?",
    "order {id} status please",
    "Could you tell me where my package is? The order number is {id}.",
    "Is my order {id} on its way?",
    "When does order #{id} arrive?",
    "Track order {id}",
]
REFUND_Q = [
    "I want a refund for order {id}, the {item} {why}.",
    "Please refund my order {id}. The {item} {why}.",
    "Can I get my money back for order {id}? The {item} {why}.",
    "Refund order {id} please, the {item} {why}.",
    "The {item} from order {id} {why}. I'd like a refund.",
]
WHY = [("was too small", "too small"), ("was too big", "too big"),
       ("arrived damaged", "damaged"), ("is the wrong color", "wrong color"),
       ("never arrived", "not delivered"), ("broke after one day", "defective")]
RETURN_Q = ["How do I return an item?", "What is your return policy?",
            "Can I return something I bought?", "How many days do I have to "
            "return an item?", "Do you accept returns?",
            "I want to send something back. How does that work?"]
RETURN_A = ["You can return any item within 30 days of delivery. Start the "
            "return from your account page, print the free return label, and "
            "drop the package at any carrier location. Refunds arrive within "
            "5 business days after we receive the item."]
SIZE_Q = [("Do your {item} run small?", "item"),
          ("What size should I get if I usually wear a {size}?", "size"),
          ("I'm between two sizes for the {item}. Which one should I pick?",
           "item"),
          ("How do I find my size?", None),
          ("Are your sizes true to fit?", None)]
SIZE_A = ("Our sizes are true to fit. If you are between two sizes, we "
          "recommend the larger one. The size chart on each product page "
          "lists the exact measurements.")
SHIP = {"the US": "3 to 5 business days", "Canada": "5 to 8 business days",
        "Mexico": "6 to 9 business days", "the UK": "7 to 10 business days",
        "Germany": "7 to 10 business days", "France": "7 to 10 business days",
        "Australia": "10 to 14 business days",
        "Japan": "8 to 12 business days"}
SHIP_Q = ["How long does shipping to {c} take?",
          "How long does delivery take to {c}?",
          "Do you ship to {c}? How long does it take?",
          "What are the shipping times for {c}?"]
GREET_Q = ["Hi", "Hello!", "Hey there", "Good morning", "Hi, can you help me?",
           "hello", "Good evening!"]
GREET_A = ["Hello! How can I help you with your order today?",
           "Hi! I can help with orders, returns, refunds, sizing and "
           "shipping. What do you need?"]
THANKS_Q = ["Thanks!", "Thank you so much.", "Great, thanks.", "ok thank you"]
THANKS_A = ["You're welcome! Is there anything else I can help you with?"]
NOID_Q = ["Where is my order?", "I want a refund.", "Can you check my order "
          "status?", "My package hasn't arrived.", "I need a refund for my "
          "last order."]
NOID_A = ["I can help with that. Could you please give me your order number?"]
OFF_Q = ["What is the capital of France?", "Write me a poem about the sea.",
         "Can you help me with my math homework?", "Who will win the game "
         "tonight?", "Tell me a joke.", "What's the weather like tomorrow?",
         "Can you write some Python code for me?", "What is the meaning of "
         "life?", "Translate 'hello' into Spanish.",
         "Recommend a good movie."]
OFF_A = ["I'm sorry, I can only help with Acme Shop orders, returns, refunds, "
         "sizing and shipping."]
SIZES = ["small", "medium", "large", "size 8", "size 10", "size 42", "XL"]


def order_id(rng):
    return str(rng.randint(10000, 99999))


def date(rng):
    return "%s %d" % (rng.choice(MONTHS), rng.randint(1, 28))


class Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.calls = 0

    def call_id(self):
        self.calls += 1
        return "call_%08x" % self.rng.getrandbits(32)

    def order(self, oid):
        r = self.rng
        n = r.randint(1, 2)
        items = r.sample(ITEMS, n)
        prices = [r.randint(8, 180) * 100 + r.choice([0, 50, 99]) for _ in items]
        status = r.choice(["processing", "shipped", "shipped", "delivered",
                           "cancelled"])
        o = {"order_id": oid, "status": status,
             "items": [{"name": i, "price_cents": p}
                       for i, p in zip(items, prices)],
             "total_cents": sum(prices)}
        if status == "shipped":
            o["carrier"] = r.choice(CARRIERS)
            o["eta"] = date(r)
        elif status == "delivered":
            o["delivered_on"] = date(r)
        elif status == "processing":
            o["ships_by"] = date(r)
        return o

    @staticmethod
    def money(c):
        return "$%d.%02d" % (c // 100, c % 100)

    def status_answer(self, o):
        oid = o["order_id"]
        s = o["status"]
        if s == "shipped":
            return ("Your order %s has shipped with %s and should arrive on "
                    "%s." % (oid, o["carrier"], o["eta"]))
        if s == "delivered":
            return "Your order %s was delivered on %s." % (oid,
                                                           o["delivered_on"])
        if s == "processing":
            return ("Your order %s is being prepared and will ship by %s."
                    % (oid, o["ships_by"]))
        return ("Your order %s was cancelled. If you were charged, the money "
                "has been returned to your card." % oid)

    def tool_call(self, name, args):
        cid = self.call_id()
        return cid, {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {
                "name": name, "arguments": json.dumps(args)}}]}

    def conv_status(self):
        oid = order_id(self.rng)
        q = self.rng.choice(STATUS_Q).format(id=oid)
        o = self.order(oid)
        cid, call = self.tool_call("lookup_order", {"order_id": oid})
        return "status", [
            {"role": "user", "content": q}, call,
            {"role": "tool", "tool_call_id": cid, "content": json.dumps(o)},
            {"role": "assistant", "content": self.status_answer(o)}]

    def conv_refund(self):
        r = self.rng
        oid = order_id(r)
        o = self.order(oid)
        if o["status"] == "cancelled":
            o["status"] = "delivered"
            o["delivered_on"] = date(r)
        item = r.choice(o["items"])
        why, reason = r.choice(WHY)
        q = r.choice(REFUND_Q).format(id=oid, item=item["name"], why=why)
        cid1, call1 = self.tool_call("lookup_order", {"order_id": oid})
        amount = item["price_cents"]
        cid2, call2 = self.tool_call("issue_refund", {
            "order_id": oid, "amount_cents": amount, "reason": reason})
        res = {"refund_id": "R-%06d" % r.randint(0, 999999),
               "order_id": oid, "amount_cents": amount, "status": "approved"}
        ans = ("I've issued a refund of %s for the %s from order %s. It will "
               "reach your card within 5 business days."
               % (self.money(amount), item["name"], oid))
        return "refund", [
            {"role": "user", "content": q}, call1,
            {"role": "tool", "tool_call_id": cid1, "content": json.dumps(o)},
            call2,
            {"role": "tool", "tool_call_id": cid2,
             "content": json.dumps(res)},
            {"role": "assistant", "content": ans}]

    def simple(self, kind, qs, ans):
        return kind, [{"role": "user", "content": self.rng.choice(qs)},
                      {"role": "assistant", "content": self.rng.choice(ans)}]

    def conv_size(self):
        q, kind = self.rng.choice(SIZE_Q)
        q = q.format(item=self.rng.choice(ITEMS), size=self.rng.choice(SIZES))
        return "sizing", [{"role": "user", "content": q},
                          {"role": "assistant", "content": SIZE_A}]

    def conv_ship(self):
        c = self.rng.choice(sorted(SHIP))
        q = self.rng.choice(SHIP_Q).format(c=c)
        a = ("Standard shipping to %s takes %s. Express shipping is about "
             "twice as fast." % (c, SHIP[c]))
        return "shipping", [{"role": "user", "content": q},
                            {"role": "assistant", "content": a}]

    def one(self):
        r = self.rng.random()
        if r < 0.30:
            kind, msgs = self.conv_status()
        elif r < 0.50:
            kind, msgs = self.conv_refund()
        elif r < 0.58:
            kind, msgs = self.simple("returns", RETURN_Q, RETURN_A)
        elif r < 0.66:
            kind, msgs = self.conv_size()
        elif r < 0.76:
            kind, msgs = self.conv_ship()
        elif r < 0.83:
            kind, msgs = self.simple("greeting", GREET_Q, GREET_A)
        elif r < 0.90:
            kind, msgs = self.simple("noid", NOID_Q, NOID_A)
        else:
            kind, msgs = self.simple("refusal", OFF_Q, OFF_A)
        # Sometimes a short follow-up turn: a greeting first, or thanks after.
        if self.rng.random() < 0.15:
            g = self.simple("greeting", GREET_Q, GREET_A)[1]
            msgs = g + msgs
        if self.rng.random() < 0.15:
            msgs = msgs + self.simple("thanks", THANKS_Q, THANKS_A)[1]
        return {"kind": kind, "messages": [{"role": "system",
                                            "content": SYSTEM}] + msgs,
                "tools": TOOLS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--eval", action="store_true",
                    help="write held-out evaluation prompts instead")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    rows = eval_set(a.seed, a.n) if a.eval else \
        (Gen(a.seed).one() for _ in range(a.n))
    with open(a.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def eval_set(seed, n):
    """Held-out prompts (a seed training never uses) with what a right
    answer is: the tool call and its arguments, or phrases the answer must
    contain.  Written to models/demo/eval.jsonl for t/demo_model.t."""
    g = Gen(seed)
    kinds = ["status", "refund", "returns", "sizing", "shipping", "greeting",
             "noid", "refusal"]
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)] if i < len(kinds) else \
            g.rng.choice(["status", "status", "refund"] + kinds)
        while True:
            c = g.one()
            if c["kind"] == kind and c["messages"][1]["role"] == "user":
                break
        user = c["messages"][1]["content"]
        e = {"kind": kind, "messages": [{"role": "user", "content": user}]}
        nxt = c["messages"][2]
        if nxt.get("tool_calls"):
            f = nxt["tool_calls"][0]["function"]
            e["tool"] = f["name"]
            e["arguments"] = json.loads(f["arguments"])
        else:
            ans = nxt["content"]
            key = {"returns": ["30 days"], "sizing": ["true to fit"],
                   "greeting": ["help"], "noid": ["order number"],
                   "refusal": ["I'm sorry"]}.get(kind)
            if kind == "shipping":
                key = [re.search(r"takes (.*?)\.", ans).group(1)]
            e["contains"] = key
        out.append(e)
    return out


if __name__ == "__main__":
    main()
