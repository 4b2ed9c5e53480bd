# A minimal, fast WhatsApp Cloud API stand-in (raw asyncio HTTP/1.1 keep-alive): every POST
# answers 200 with a unique wamid.
import asyncio, sys
counter = 0
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t; self.buf = b""
    def data_received(self, data):
        global counter
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0: return
            head = self.buf[:end].decode("latin1").lower()
            length = 0
            for line in head.split("\r\n"):
                if line.startswith("content-length:"): length = int(line.split(":")[1])
            if len(self.buf) < end + 4 + length: return
            self.buf = self.buf[end + 4 + length:]
            counter += 1
            body = b'{"messaging_product":"whatsapp","messages":[{"id":"wamid.FAST%09d"}]}' % counter
            self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
async def main():
    s = await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]))
    await s.serve_forever()
asyncio.run(main())
