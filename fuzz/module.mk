# The module's fuzz targets: the module's sources and nginx's core, both
# built by nginx.sh with clang into $(NGX_TREE); the targets link them
# without nginx's main().

NGX_TREE  := $(BUILD)/nginx-src
NGX_OBJS   = $(filter-out $(NGX_TREE)/objs/src/core/nginx.o, \
               $(shell find $(NGX_TREE)/objs/src -name '*.o')) \
             $(NGX_TREE)/objs/ngx_modules.o $(NGX_TREE)/objs/nginx-nomain.o
LLM_OBJDIR := $(NGX_TREE)/objs/addon/ngx_http_llm_module
LLM_OBJS   = $(wildcard $(LLM_OBJDIR)/*.o) \
             $(NGX_TREE)/objs/addon/llm_proto/llm.pb-c.o
NGX_INCS  := -I$(NGX_TREE)/src/core -I$(NGX_TREE)/src/event \
             -I$(NGX_TREE)/src/event/modules -I$(NGX_TREE)/src/os/unix \
             -I$(NGX_TREE)/objs -I$(NGX_TREE)/src/http \
             -I$(NGX_TREE)/src/http/modules \
             -I$(NGX_TREE)/objs/addon/llm_proto -I$(REPO)/ngx_http_llm_module
# nginx's own warning flags (auto/cc/clang)
NGX_CFLAGS := $(OPT) -pipe -Wall -Wextra -Wpointer-arith \
              -Wconditional-uninitialized -Wno-unused-parameter -Werror
NGX_LIBS  := -ldl -lpthread -lcrypt -lpcre2-8 -lz -lprotobuf-c -ljansson -lhiredis \
             -lcrypto

.PHONY: nginx
nginx:
	@JOBS=$(JOBS) $(REPO)/fuzz/nginx.sh $(BUILD)

$(BIN)/fuzz_module_request: fuzz_module_request.c ngx_fuzz.h nginx
	@mkdir -p $(@D)
	@echo "  CC+LD $(@F)"
	@$(CC) $(NGX_CFLAGS) -fsanitize=fuzzer $(SAN) $(NGX_INCS) -o $@ $< \
	    $(NGX_OBJS) $(LLM_OBJS) $(NGX_LIBS)

# includes ngx_http_llm_upstream.c and _backend.c: their objects stay out
$(BIN)/fuzz_module_events: fuzz_module_events.c ngx_fuzz.h nginx
	@mkdir -p $(@D)
	@echo "  CC+LD $(@F)"
	@$(CC) $(NGX_CFLAGS) -fsanitize=fuzzer $(SAN) $(NGX_INCS) -o $@ $< \
	    $(NGX_OBJS) \
	    $(filter-out $(LLM_OBJDIR)/ngx_http_llm_upstream.o \
	                 $(LLM_OBJDIR)/ngx_http_llm_backend.o, $(LLM_OBJS)) \
	    $(NGX_LIBS)
