module local/pso-testserver

go 1.26
