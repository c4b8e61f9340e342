select
    c.customer_id,
    c.first_name,
    coalesce(t.orders, 0) as orders,
    coalesce(t.revenue, 0) as revenue,
    t.last_order
from {{ ref('stg_customers') }} c
left join {{ ref('int_order_totals') }} t using (customer_id)
